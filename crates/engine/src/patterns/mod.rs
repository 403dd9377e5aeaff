//! The multi-agent patterns that are more than a tool: a router agent's classification turn
//! (`router`), and the run of a supervisor's sub-agent in its isolated context (`supervisor`).
//! Steps and skills are tools (`crate::tools::steps`, `crate::tools::skills`).

pub(crate) mod router;
pub(crate) mod supervisor;
