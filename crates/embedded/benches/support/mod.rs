//! What the embedded benches share.

use std::time::Duration;

use serde_json::{Value, json};
use switchboard_domain::tenant::{MAX_CONCURRENT_SESSIONS, MAX_INVOCATIONS_PER_MINUTE, MAX_TOKENS_PER_DAY};

/// The bench tenant's limits: the highest accepted, so that no message of a run is refused
/// (the defaults admit 60 a minute). The limits are still checked for every message.
pub fn highest_limits() -> Value {
    json!({
        "invocationsPerMinute": MAX_INVOCATIONS_PER_MINUTE,
        "tokensPerDay": MAX_TOKENS_PER_DAY,
        "concurrentSessions": MAX_CONCURRENT_SESSIONS,
    })
}

/// User + system CPU of this process so far (all threads), from `/proc/self/stat`.
pub fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) closed by ')'.
    let rest = stat.rfind(')').map_or("", |i| &stat[i + 2..]);
    let fields: Vec<&str> = rest.split(' ').collect();
    let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 here.
    let ticks = field(11) + field(12);
    // USER_HZ is 100 on every Linux this runs on.
    Duration::from_millis(ticks * 10)
}
