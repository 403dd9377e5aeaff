//! Who may do what: the role a principal holds, the groups the internal API's routes fall into,
//! and which roles each group admits. Pure rules; which group a route belongs to is the API's to
//! say, and on AWS IAM policies per group apply the same table before the API runs.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A principal's role. `admin` spans every tenant; the others belong to one tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The platform: every tenant, tenants themselves, metrics.
    Admin,
    /// The tenant: its keys and settings, and everything a builder and an operator do.
    Owner,
    /// Configuration: agents, triggers, tools, skills, bundles, rollbacks, replays.
    Builder,
    /// Conversations: inbound events, claim, reply, hand off, end.
    Operator,
    /// Reading only.
    Viewer,
}

impl Role {
    pub const ALL: [Role; 5] = [Role::Admin, Role::Owner, Role::Builder, Role::Operator, Role::Viewer];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Owner => "owner",
            Role::Builder => "builder",
            Role::Operator => "operator",
            Role::Viewer => "viewer",
        }
    }

    /// Whether this role may use the routes of `group`.
    pub fn may(self, group: RouteGroup) -> bool {
        use RouteGroup as G;
        match self {
            Role::Admin => true,
            Role::Owner => group != G::Platform,
            Role::Builder => matches!(group, G::Read | G::Configure | G::Invoke),
            Role::Operator => matches!(group, G::Read | G::Operate | G::Invoke),
            Role::Viewer => group == G::Read,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| "must be one of admin, owner, builder, operator, viewer".to_owned())
    }
}

/// The internal API's routes by what they touch; a role admits whole groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RouteGroup {
    /// Reading a tenant's records: configuration, sessions, executions, reports, events.
    Read,
    /// Writing configuration (agents, triggers, tools, skills, bundles, rollbacks), the trigger
    /// tester and replays.
    Configure,
    /// Working conversations: inbound events, claim, reply, hand off, end.
    Operate,
    /// Starting an agent by hand (`agents.invoke`), which builders and operators both do.
    Invoke,
    /// The tenant's own settings (name, recording) and its API keys.
    Own,
    /// The platform: creating and deleting tenants, their status and limits, metrics.
    Platform,
}

impl RouteGroup {
    pub const ALL: [RouteGroup; 6] = [
        RouteGroup::Read,
        RouteGroup::Configure,
        RouteGroup::Operate,
        RouteGroup::Invoke,
        RouteGroup::Own,
        RouteGroup::Platform,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RouteGroup::Read => "read",
            RouteGroup::Configure => "configure",
            RouteGroup::Operate => "operate",
            RouteGroup::Invoke => "invoke",
            RouteGroup::Own => "own",
            RouteGroup::Platform => "platform",
        }
    }

    /// The roles this group admits, strongest first.
    pub fn roles(self) -> Vec<Role> {
        Role::ALL.into_iter().filter(|r| r.may(self)).collect()
    }

    /// The roles this group admits, in words: "builder, operator, owner or admin".
    pub fn needs(self) -> String {
        let mut names: Vec<&str> = self.roles().into_iter().rev().map(Role::as_str).collect();
        match names.pop() {
            None => String::new(),
            Some(last) if names.is_empty() => last.to_owned(),
            Some(last) => format!("{} or {last}", names.join(", ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_role_reads_and_only_the_admin_runs_the_platform() {
        for role in Role::ALL {
            assert!(role.may(RouteGroup::Read), "{role}");
            assert_eq!(role.may(RouteGroup::Platform), role == Role::Admin, "{role}");
        }
    }

    #[test]
    fn builders_configure_and_operators_operate_but_not_each_other() {
        assert!(Role::Builder.may(RouteGroup::Configure) && !Role::Builder.may(RouteGroup::Operate));
        assert!(Role::Operator.may(RouteGroup::Operate) && !Role::Operator.may(RouteGroup::Configure));
        assert!(!Role::Builder.may(RouteGroup::Own) && !Role::Operator.may(RouteGroup::Own));
        assert!(RouteGroup::ALL.iter().all(|g| Role::Owner.may(*g) == (*g != RouteGroup::Platform)));
        assert!(RouteGroup::ALL.iter().filter(|g| Role::Viewer.may(**g)).eq([&RouteGroup::Read]));
    }

    #[test]
    fn a_group_names_the_roles_it_needs() {
        assert_eq!(RouteGroup::Platform.needs(), "admin");
        assert_eq!(RouteGroup::Configure.needs(), "builder, owner or admin");
        assert_eq!(RouteGroup::Invoke.needs(), "operator, builder, owner or admin");
    }

    #[test]
    fn roles_parse_from_their_names_only() {
        for role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>(), Ok(role));
        }
        assert!("Admin".parse::<Role>().is_err() && "".parse::<Role>().is_err());
    }
}
