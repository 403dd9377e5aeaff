//! The API's routes in one place: which path and method reach which resource, behind which
//! layers. Handlers live in `resources/`; the gate and logging in `middleware`.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::middleware;
use axum::routing::{delete, get, post};
use serde_json::Value;
use switchboard_engine::ConfigKind;

use crate::auth::Writer;
use crate::extract::{JsonBody, Query, Tenant};
use crate::problem::Problem;
use crate::resources::config::versions;
use crate::resources::{
    config, conversations, events, executions, insights, invoke, mcp, openapi, reports, sessions, status, tenants,
    trigger_test,
};
use crate::state::ApiState;

type AppState = Arc<ApiState>;

/// Every route of the API: what `switchboard serve` mounts.
pub fn routes(state: ApiState) -> Router {
    // Shared, not copied: axum clones the state for every extractor of every request.
    let state = Arc::new(state);
    let app = gated(operation_routes(configuration_routes(Router::new())), &state);
    finish(console_routes(hook_routes(app)), state)
}

/// The configuration half of the API, for a function of its own (the AWS profile's
/// `internal-api`): health, the contract, tenants, their keys, and agents, triggers, tools and
/// skills with their versions. The API Gateway in `template.yaml` sends it these paths; a path of
/// the other half answers 404 here.
pub fn configuration_api(state: ApiState) -> Router {
    let state = Arc::new(state);
    let app = gated(configuration_routes(Router::new()), &state);
    finish(app, state)
}

/// The operations half of the API, for a function of its own (the AWS profile's
/// `operations-api`): event intake, invoke, conversations, sessions and what operators do with
/// them, approvals, executions, reports and the event log.
pub fn operations_api(state: ApiState) -> Router {
    let state = Arc::new(state);
    let app = gated(operation_routes(Router::new()), &state);
    finish(app, state)
}

/// Webhook triggers' deliveries alone, for a function of their own (the AWS profile's
/// `webhook-intake`): the one route without SigV4 in front, authenticated by signatures. Any other
/// path answers 404 here.
pub fn hooks_api(state: ApiState) -> Router {
    let state = Arc::new(state);
    let app = Router::new()
        .fallback(|| async { Problem::not_found("no such route") })
        .method_not_allowed_fallback(|| async { Problem::method_not_allowed() });
    finish(hook_routes(app), state)
}

/// Webhook triggers' deliveries, outside the key check: their signature authenticates them.
fn hook_routes(app: Router<AppState>) -> Router<AppState> {
    app.route("/hooks/{tenant}/{trigger}", post(invoke::triggers::deliver))
}

/// The routes behind the key check, with the API's answers for a path or method it does not have.
fn gated(app: Router<AppState>, state: &AppState) -> Router<AppState> {
    app.fallback(|| async { Problem::not_found("no such route") })
        .method_not_allowed_fallback(|| async { Problem::method_not_allowed() })
        .route_layer(middleware::from_fn_with_state(state.clone(), crate::middleware::authenticate))
}

/// The gate every request passes, and the request log.
fn finish(app: Router<AppState>, state: AppState) -> Router {
    app.layer(middleware::from_fn_with_state(state.clone(), crate::middleware::read_request))
        .layer(middleware::from_fn(crate::middleware::log_requests))
        .with_state(state)
}

/// Health, the contract, tenants and their keys, the configuration records, and tools imported from
/// MCP servers.
fn configuration_routes(app: Router<AppState>) -> Router<AppState> {
    let app = config_routes(app)
        .route("/health", get(status::health))
        .route("/ready", get(status::ready))
        .route("/metrics", get(status::metrics))
        .route("/openapi.json", get(openapi::openapi))
        .route("/tenants", post(tenants::create))
        .route("/tenants/{tenant}", get(tenants::get_one).patch(tenants::update).delete(tenants::delete))
        .route("/tenants/{tenant}/apply", post(config::apply))
        .route("/tenants/{tenant}/triggers/test", post(trigger_test::test))
        .route("/tenants/{tenant}/tools/discover", post(mcp::discover))
        .route("/tenants/{tenant}/tools/{id}/refresh", post(mcp::refresh))
        .route("/tenants/{tenant}/me", get(tenants::me));
    key_routes(app)
}

/// Intake, invoke, conversations and sessions, approvals, executions, reports and events.
fn operation_routes(app: Router<AppState>) -> Router<AppState> {
    let app = app
        .route("/events", post(events::post_event))
        .route("/tenants/{tenant}/agents/{id}/invoke", post(invoke::invoke))
        .route("/tenants/{tenant}/triggers/{id}/run", post(invoke::triggers::run))
        .route("/tenants/{tenant}/conversations/{conversation}/messages", get(conversations::messages))
        .route("/tenants/{tenant}/conversations/{conversation}/sessions", get(conversations::sessions))
        .route("/tenants/{tenant}/sessions", get(sessions::list))
        .route("/tenants/{tenant}/sessions/{session}", get(sessions::get_one))
        .route("/tenants/{tenant}/sessions/{session}/executions", get(executions::list))
        .route("/tenants/{tenant}/sessions/{session}/handoff", post(sessions::hand_off))
        .route("/tenants/{tenant}/sessions/{session}/claim", post(sessions::claim))
        .route("/tenants/{tenant}/sessions/{session}/messages", post(sessions::reply))
        .route("/tenants/{tenant}/sessions/{session}/end", post(sessions::end))
        .route("/tenants/{tenant}/sessions/{session}/cancel", post(sessions::cancel))
        .route("/tenants/{tenant}/executions", get(executions::by_source))
        .route("/tenants/{tenant}/executions/{execution}", get(executions::get_one))
        .route("/tenants/{tenant}/executions/{execution}/model-calls", get(executions::model_calls))
        .route("/tenants/{tenant}/executions/{execution}/replay", post(executions::replay))
        .route("/tenants/{tenant}/usage", get(reports::usage))
        .route("/tenants/{tenant}/activity", get(reports::activity))
        .route("/tenants/{tenant}/insights", get(insights::insights))
        .route("/tenants/{tenant}/events", get(events::list_events))
        .route("/tenants/{tenant}/events/stream", get(events::stream_events))
        .route("/tenants/{tenant}/events/push", post(events::push_ticket));
    approval_routes(app)
}

/// A tenant's API keys: issued, listed, rotated, revoked.
#[cfg(feature = "api-keys")]
fn key_routes(app: Router<AppState>) -> Router<AppState> {
    use crate::resources::keys;
    app.route("/tenants/{tenant}/keys", post(keys::issue_key).get(keys::list_keys))
        .route("/tenants/{tenant}/keys/{key}", delete(keys::revoke_key))
        .route("/tenants/{tenant}/keys/{key}/rotate", post(keys::rotate_key))
}

/// Built without key management (the internal-api Lambda): the key routes say where keys are.
#[cfg(not(feature = "api-keys"))]
fn key_routes(app: Router<AppState>) -> Router<AppState> {
    let elsewhere = || async { tenants::keys_elsewhere() };
    app.route("/tenants/{tenant}/keys", post(elsewhere).get(elsewhere))
        .route("/tenants/{tenant}/keys/{key}", delete(elsewhere))
        .route("/tenants/{tenant}/keys/{key}/rotate", post(elsewhere))
}

/// The approvals paused turns wait on: listed, one, approved, denied.
fn approval_routes(app: Router<AppState>) -> Router<AppState> {
    use crate::resources::approvals;
    app.route("/tenants/{tenant}/approvals", get(approvals::list))
        .route("/tenants/{tenant}/approvals/{approval}", get(approvals::get_one))
        .route("/tenants/{tenant}/approvals/{approval}/approve", post(approvals::approve))
        .route("/tenants/{tenant}/approvals/{approval}/deny", post(approvals::deny))
}

/// The console's page, for the browser to call this API with its operator's key.
#[cfg(feature = "console")]
fn console_routes(app: Router<AppState>) -> Router<AppState> {
    crate::console::routes(app, crate::console::ConsoleConfig { signing: "none", upstream: None })
}

#[cfg(not(feature = "console"))]
fn console_routes(app: Router<AppState>) -> Router<AppState> {
    app
}

/// The same five routes for each kind of configuration record.
fn config_routes(mut app: Router<AppState>) -> Router<AppState> {
    for kind in [ConfigKind::Agent, ConfigKind::Trigger, ConfigKind::Tool, ConfigKind::Skill] {
        let seg = config::segment(kind);
        app = app
            .route(
                &format!("/tenants/{{tenant}}/{seg}"),
                get(move |s: State<AppState>, q: Query<config::ListQuery>, t: Result<Tenant, Problem>| {
                    config::list(kind, s, q, t)
                })
                .post(move |s: State<AppState>, w: Writer, t: Tenant, b: JsonBody<Value>| {
                    config::create(kind, s, w, t, b)
                }),
            )
            .route(
                &format!("/tenants/{{tenant}}/{seg}/{{id}}"),
                get(move |s: State<AppState>, t: Tenant, p: Path<(String, String)>| config::get_one(kind, s, t, p))
                    .put(
                        move |s: State<AppState>,
                              w: Writer,
                              t: Tenant,
                              p: Path<(String, String)>,
                              h: HeaderMap,
                              b: Result<JsonBody<Value>, Problem>| {
                            config::replace(kind, s, w, t, p, h, b)
                        },
                    )
                    .delete(
                        move |s: State<AppState>, w: Writer, t: Tenant, p: Path<(String, String)>, h: HeaderMap| {
                            config::delete(kind, s, w, t, p, h)
                        },
                    ),
            );
        app = version_routes(app, kind);
    }
    app
}

/// Each record's kept versions: the list, one version, a diff, and a rollback.
fn version_routes(app: Router<AppState>, kind: ConfigKind) -> Router<AppState> {
    let base = format!("/tenants/{{tenant}}/{}/{{id}}", config::segment(kind));
    app.route(
        &format!("{base}/versions"),
        get(move |s: State<AppState>, q: Query<versions::VersionsQuery>, t: Tenant, p: Path<(String, String)>| {
            versions::list(kind, s, q, t, p)
        }),
    )
    .route(
        &format!("{base}/versions/{{n}}"),
        get(move |s: State<AppState>, t: Tenant, p: Path<(String, String, String)>| versions::get_one(kind, s, t, p)),
    )
    .route(
        &format!("{base}/versions/{{n}}/diff"),
        get(move |s: State<AppState>, q: Query<versions::DiffQuery>, t: Tenant, p: Path<(String, String, String)>| {
            versions::diff(kind, s, q, t, p)
        }),
    )
    .route(
        &format!("{base}/rollback"),
        post(
            move |s: State<AppState>,
                  w: Writer,
                  t: Tenant,
                  p: Path<(String, String)>,
                  h: HeaderMap,
                  b: Result<JsonBody<versions::RollbackBody>, Problem>| {
                versions::rollback(kind, s, w, t, p, h, b)
            },
        ),
    )
}
