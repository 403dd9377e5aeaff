//! What the `bodies` fuzz target of `fuzz/` checks: every JSON body the API reads, through the
//! code its handlers run (`extract::parse_json` or the bundle's reader, then each body's own
//! checks), as far as it goes without a store. Here so that the test replaying the corpus
//! (`tests/suite/fuzz_corpus.rs`) runs the same code; not part of the crate's API (hidden from
//! its docs). A check panics only if the code under test does; a property that does not hold is
//! returned as an `Err` for the caller to panic on.

use axum::http::{HeaderMap, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;
use switchboard_domain::fuzzing::{Broken, named, same_json};
use switchboard_domain::{Tenant, TenantId, TenantLimits, TenantStatus, ValidationErrors};
use switchboard_engine::{ConfigKind, SystemClock, TenantChanges};

use crate::extract::parse_json;
use crate::problem::Problem;
use crate::resources::{config, invoke, sessions, tenants};

/// A JSON body the API reads, by the request that sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// `POST`/`PUT …/agents[/{id}]`.
    Agent,
    /// `POST`/`PUT …/triggers[/{id}]`.
    Trigger,
    /// `POST`/`PUT …/tools[/{id}]`.
    Tool,
    /// `POST`/`PUT …/skills[/{id}]`.
    Skill,
    /// `POST /tenants`.
    NewTenant,
    /// `PATCH /tenants/{t}`: name, status and limits.
    TenantChanges,
    /// `POST …/sessions/{s}/handoff`.
    Handoff,
    /// `POST …/sessions/{s}/claim`.
    Claim,
    /// `POST …/sessions/{s}/messages`.
    Reply,
    /// `POST …/sessions/{s}/end`.
    End,
    /// `POST …/agents/{id}/invoke`.
    Invoke,
    /// `POST /tenants/{t}/apply` (`switchboard apply`): a tenant bundle.
    Bundle,
}

impl Body {
    pub const ALL: [Body; 12] = [
        Body::Agent,
        Body::Trigger,
        Body::Tool,
        Body::Skill,
        Body::NewTenant,
        Body::TenantChanges,
        Body::Handoff,
        Body::Claim,
        Body::Reply,
        Body::End,
        Body::Invoke,
        Body::Bundle,
    ];

    /// The body a fuzz input's first byte picks: `A` the first of [`Body::ALL`], `B` the
    /// second, and so on round (every byte picks one), so that a corpus file reads `A{…}`.
    pub fn picked_by(byte: u8) -> Body {
        Self::ALL[usize::from(byte.wrapping_sub(b'A')) % Self::ALL.len()]
    }

    /// The first byte of a fuzz input for this body.
    pub fn letter(self) -> u8 {
        let position = Self::ALL.iter().position(|b| *b == self).unwrap_or_default();
        b'A' + u8::try_from(position).unwrap_or_default()
    }
}

/// A fuzz input: its first byte picks the body ([`Body::picked_by`]), the rest is the body.
pub fn body(input: &[u8]) -> Result<(), Broken> {
    match input.split_first() {
        Some((first, rest)) => check(Body::picked_by(*first), rest),
        None => Ok(()),
    }
}

/// `bytes` as a body of kind `body`. What is refused is a 400 naming every field at fault by its
/// pointer; a configuration record accepted is the same record again when what the API answers
/// with it (its JSON) is sent back without the fields the server sets. The other bodies are
/// only read, never written out, so they have no round trip to check.
pub fn check(body: Body, bytes: &[u8]) -> Result<(), Broken> {
    match body {
        Body::Agent => record(ConfigKind::Agent, bytes),
        Body::Trigger => record(ConfigKind::Trigger, bytes),
        Body::Tool => record(ConfigKind::Tool, bytes),
        Body::Skill => record(ConfigKind::Skill, bytes),
        Body::NewTenant => refusal(parse_json::<Value>(bytes).and_then(|v| invalid(tenants::new_tenant(v)))),
        Body::TenantChanges => refusal(parse_json::<TenantChanges>(bytes).and_then(|c| invalid(tenant_changes(c)))),
        Body::Handoff => read(bytes, |b: sessions::HandoffBody| b.check().map(drop)),
        Body::Claim => read(bytes, |b: sessions::ClaimBody| b.check(&fuzz_caller())),
        Body::Reply => read(bytes, |b: sessions::ReplyBody| b.check(&fuzz_caller(), Some("fuzz-1"))),
        Body::End => read(bytes, |b: sessions::EndBody| b.check(&fuzz_caller())),
        Body::Invoke => {
            refusal(parse_json::<invoke::InvokeBody>(bytes).and_then(|b| invoke::check_request(&b, &HeaderMap::new())))
        }
        Body::Bundle => refusal(tenant().and_then(|t| config::read_bundle(&t, bytes, &SystemClock))),
    }
}

/// The tenant every checked body belongs to.
fn tenant() -> Result<TenantId, Problem> {
    "t-1".parse().map_err(|_| Problem::internal())
}

/// A body of type `T` with its own checks.
fn read<T: DeserializeOwned>(
    bytes: &[u8],
    checks: impl FnOnce(T) -> Result<(), ValidationErrors>,
) -> Result<(), Broken> {
    refusal(parse_json::<T>(bytes).and_then(|b| invalid(checks(b))))
}

fn invalid<T>(result: Result<T, ValidationErrors>) -> Result<T, Problem> {
    result.map_err(Problem::invalid)
}

/// A refusal is a 400 whose errors name the fields at fault.
fn refusal<T>(result: Result<T, Problem>) -> Result<(), Broken> {
    let Err(problem) = result else { return Ok(()) };
    if problem.status != StatusCode::BAD_REQUEST {
        return Err(format!("a bad body answered {}: {}", problem.status, problem.detail));
    }
    problem.to_json();
    named(&ValidationErrors(problem.errors))
}

/// A record of `kind` as `POST …/{kind}` builds and validates it before the store is asked
/// about references; accepted, it must come back the same through a `GET` and a `PUT` of
/// what that returned.
fn record(kind: ConfigKind, bytes: &[u8]) -> Result<(), Broken> {
    let created_at = "2026-01-01T00:00:00Z";
    let built = tenant().and_then(|t| {
        let body = parse_json::<Value>(bytes)?;
        let id = config::new_id(kind);
        let record = invalid(config::build(kind, &t, &id, body, created_at, 1))?;
        invalid(record.validate())?;
        Ok((t, id, record))
    });
    let (t, id, record) = match built {
        Ok(built) => built,
        Err(problem) => return refusal(Err::<(), _>(problem)),
    };
    let answered = serde_json::to_value(&record).map_err(|e| format!("cannot be written out: {e}"))?;
    let Value::Object(mut sent) = answered.clone() else { return Err(format!("written out as {answered}")) };
    for field in ["tenantId", config::id_field(kind), "createdAt", "updatedAt", "version"] {
        sent.remove(field);
    }
    let text = serde_json::to_vec(&sent).map_err(|e| format!("cannot be written out: {e}"))?;
    let again = parse_json::<Value>(&text)
        .and_then(|body| invalid(config::build(kind, &t, &id, body, created_at, 1)))
        .map_err(|p| format!("accepted, then refused when sent back: {:?}", p.errors))?;
    let mut again = serde_json::to_value(&again).map_err(|e| format!("cannot be written out: {e}"))?;
    // Set again by the server on every write.
    again["updatedAt"] = answered["updatedAt"].clone();
    if !same_json(&again, &answered) {
        return Err(format!("sent back, the record differs: {answered} then {again}"));
    }
    Ok(())
}

/// What `PATCH /tenants/{t}` checks of a change before it is stored: the engine's own step
/// ([`TenantChanges::apply`]), on a tenant at the default limits.
fn tenant_changes(changes: TenantChanges) -> Result<(), ValidationErrors> {
    let mut tenant = Tenant {
        tenant_id: "t-fuzz".parse().map_err(|_| ValidationErrors::single("", "a fixed tenant id"))?,
        name: "Fuzz".into(),
        status: TenantStatus::Active,
        created_at: chrono::DateTime::UNIX_EPOCH,
        limits: TenantLimits::default(),
        recording: Default::default(),
        calendars: Default::default(),
        time_zone: None,
    };
    changes.apply(&mut tenant)
}

/// The signed-in principal the session bodies are checked against.
fn fuzz_caller() -> crate::auth::Caller {
    crate::auth::Caller::admin("fuzz")
}
