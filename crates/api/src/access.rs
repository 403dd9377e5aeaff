//! Which group each route of the API is in, so that one table (`switchboard_domain::access`)
//! says which roles reach it. The middleware asks here with the route as axum matched it.

use axum::http::Method;
use switchboard_domain::access::RouteGroup;

/// The group of `method` on the route template `route` (`/tenants/{tenant}/agents/{id}`).
/// A route this does not name falls in `configure` when it writes and `read` when it reads, so
/// a new route is never open to more roles than the configuration routes.
pub fn route_group(method: &Method, route: &str) -> RouteGroup {
    let reads = *method == Method::GET || *method == Method::HEAD;
    match route {
        "/tenants" | "/metrics" => RouteGroup::Platform,
        "/events" => RouteGroup::Operate,
        "/tenants/{tenant}" if reads => RouteGroup::Read,
        // Its name and recording setting; its status and limits are the admin's (the handler).
        "/tenants/{tenant}" if *method == Method::PATCH => RouteGroup::Own,
        "/tenants/{tenant}" => RouteGroup::Platform,
        "/tenants/{tenant}/me" => RouteGroup::Read,
        r if r.starts_with("/tenants/{tenant}/keys") => RouteGroup::Own,
        // A ticket for the live push reads events like the stream does.
        "/tenants/{tenant}/events/push" => RouteGroup::Read,
        _ if reads => RouteGroup::Read,
        "/tenants/{tenant}/agents/{id}/invoke" | "/tenants/{tenant}/triggers/{id}/run" => RouteGroup::Invoke,
        r if r.starts_with("/tenants/{tenant}/sessions/{session}/") => RouteGroup::Operate,
        r if r.starts_with("/tenants/{tenant}/approvals/") => RouteGroup::Operate,
        _ => RouteGroup::Configure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_fall_in_their_groups() {
        let g = |m: Method, r: &str| route_group(&m, r);
        assert_eq!(g(Method::POST, "/tenants/{tenant}/agents"), RouteGroup::Configure);
        assert_eq!(g(Method::POST, "/tenants/{tenant}/sessions/{session}/claim"), RouteGroup::Operate);
        assert_eq!(g(Method::POST, "/tenants/{tenant}/approvals/{approval}/approve"), RouteGroup::Operate);
        assert_eq!(g(Method::GET, "/tenants/{tenant}/approvals"), RouteGroup::Read);
        assert_eq!(g(Method::GET, "/tenants/{tenant}/sessions/{session}/executions"), RouteGroup::Read);
        assert_eq!(g(Method::DELETE, "/tenants/{tenant}/keys/{key}"), RouteGroup::Own);
        assert_eq!(g(Method::DELETE, "/tenants/{tenant}"), RouteGroup::Platform);
        assert_eq!(g(Method::POST, "/tenants/{tenant}/triggers/{id}/run"), RouteGroup::Invoke);
        assert_eq!(g(Method::POST, "/tenants/{tenant}/something-new"), RouteGroup::Configure);
        // Listing an MCP server's tools calls the tenant's server, as a builder would.
        assert_eq!(g(Method::POST, "/tenants/{tenant}/tools/discover"), RouteGroup::Configure);
        assert_eq!(g(Method::POST, "/tenants/{tenant}/tools/{id}/refresh"), RouteGroup::Configure);
    }
}
