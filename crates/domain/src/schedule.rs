//! Schedule triggers' times: parses and checks a schedule, and finds its next slot.
//!
//! # Expressions
//!
//! * `rate(N minute|minutes|hour|hours|day|days)`: every N units, N ≥ 1, at most 366 days. Slots
//!   are the multiples of the period since the Unix epoch, in UTC: the time zone does not move
//!   them (use a cron expression for local times).
//! * A five-field cron expression, `minute hour day-of-month month day-of-week`. Each field is
//!   `*`, a number, a range `a-b`, a step `*/s`, `a-b/s` or `a/s` (from `a` to the field's last
//!   value), or a comma-separated list of those. Months may be `JAN`–`DEC` and weekdays
//!   `SUN`–`SAT` (any case); weekday 0 and 7 are Sunday. When both day fields are restricted
//!   (neither is `*`), a day matches when either does, as crontab(5) says; otherwise both must.
//!   A day of the month that no month of the expression has (`0 0 30 2 *`) is refused. No `?`,
//!   `L`, `W`, `#`, macros, seconds or years.
//!
//! # Time zones
//!
//! Cron times are wall-clock times in `timeZone` (an IANA name, looked up in the system's tz
//! database, `/usr/share/zoneinfo`). A time skipped by a change to summer time runs at the
//! instant the skipped time maps to forwards (02:30 in Paris on the day clocks go from 02:00 to
//! 03:00 runs at 03:30 summer time); a time that happens twice when clocks go back runs once, at
//! its first occurrence.

use chrono::{DateTime, Utc};
use jiff::civil::Date;
use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};

use crate::limits::MAX_MESSAGE_TEXT_BYTES;
use crate::validation::ValidationErrors;

/// A slot found due more than this long after its time is missed: [`Missed`] decides.
pub const LATE_AFTER: chrono::Duration = chrono::Duration::minutes(5);

const MAX_EXPRESSION_BYTES: usize = 256;
/// How far ahead a slot is looked for (a day-of-month only some years have, 29 February, is
/// within it).
const SEARCH_DAYS: usize = 366 * 9;

/// What a schedule trigger runs: when (`expression`, in `time_zone`), on which conversation, with
/// which input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Schedule {
    /// `rate(<n> <unit>)` or a five-field cron expression.
    pub expression: String,
    /// An IANA time zone name. Written without one, a trigger takes its tenant's `timeZone`
    /// (UTC when the tenant has none) when it is stored ([`fill_zone`]); empty only until then.
    #[serde(default)]
    pub time_zone: String,
    /// The conversation every run is on; absent: each run has a conversation of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    /// The text the agent is given to start each run.
    pub input: String,
    /// What becomes of a slot found late (after downtime).
    #[serde(default, skip_serializing_if = "Missed::is_run_once")]
    pub missed: Missed,
}

/// The zone a schedule written without one is in when its tenant has none.
pub const DEFAULT_ZONE: &str = "UTC";

/// Pushes onto `errors`, at `pointer`, why `zone` is not an IANA time zone name as the tz
/// database writes it (one the database finds in another case is refused with its name).
pub fn check_zone(zone: &str, pointer: &str, errors: &mut ValidationErrors) {
    match TimeZone::get(zone) {
        Err(_) => errors.push(pointer, format!("unknown time zone {zone:?}")),
        Ok(tz) => {
            if let Some(name) = tz.iana_name().filter(|n| *n != zone) {
                errors.push(pointer, format!("write the zone as {name:?}"));
            }
        }
    }
}

/// `zone` in place of an empty one: what a record written without a time zone is stored with.
pub fn fill_zone(slot: &mut String, zone: &str) -> bool {
    let empty = slot.is_empty();
    if empty {
        zone.clone_into(slot);
    }
    empty
}

/// What becomes of a slot found more than [`LATE_AFTER`] late: run once (however many slots
/// passed meanwhile, the next ones follow the clock again), or skip it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Missed {
    #[default]
    RunOnce,
    Skip,
}

impl Missed {
    pub fn is_run_once(&self) -> bool {
        *self == Missed::RunOnce
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Missed::RunOnce => "run_once",
            Missed::Skip => "skip",
        }
    }
}

/// A schedule's expression compiled in its time zone.
#[derive(Debug, Clone)]
pub struct Slots {
    when: When,
    tz: TimeZone,
}

#[derive(Debug, Clone)]
enum When {
    Every { millis: i64 },
    Cron(Box<Cron>),
}

/// Each field as the set of its values (bit n: value n).
#[derive(Debug, Clone)]
struct Cron {
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    weekdays: u8,
    /// Both day fields restricted: a day matches when either does.
    either_day: bool,
}

impl Schedule {
    /// Pushes every fault onto `errors`, each under `prefix` and the field.
    pub fn check(&self, prefix: &str, errors: &mut ValidationErrors) {
        if let Err(e) = parse(&self.expression) {
            errors.push(format!("{prefix}/expression"), e);
        }
        // Empty: the tenant's, filled in when the trigger is stored.
        if !self.time_zone.is_empty() {
            check_zone(&self.time_zone, &format!("{prefix}/timeZone"), errors);
        }
        if let Some(c) = &self.conversation_id
            && let Err(e) = crate::ids::check_external_id(c)
        {
            errors.push(format!("{prefix}/conversationId"), e.to_string());
        }
        if self.input.trim().is_empty() {
            errors.push(format!("{prefix}/input"), "must not be blank");
        } else if self.input.len() > MAX_MESSAGE_TEXT_BYTES {
            errors.push(format!("{prefix}/input"), format!("must be at most {MAX_MESSAGE_TEXT_BYTES} bytes"));
        }
    }

    /// The compiled schedule, or the faults [`Schedule::check`] reports.
    pub fn slots(&self, prefix: &str) -> Result<Slots, ValidationErrors> {
        let mut errors = ValidationErrors::default();
        self.check(prefix, &mut errors);
        errors.into_result()?;
        let when = parse(&self.expression).map_err(|e| ValidationErrors::single(format!("{prefix}/expression"), e))?;
        let tz = TimeZone::get(&self.time_zone)
            .map_err(|_| ValidationErrors::single(format!("{prefix}/timeZone"), "unknown time zone"))?;
        Ok(Slots { when, tz })
    }

    /// What changes when the schedule's times change: expression and time zone.
    pub fn spec(&self) -> String {
        format!("{} @ {}", self.expression.trim(), self.time_zone)
    }
}

impl Slots {
    /// The first slot strictly after `t`; `None` when there is none within about nine years.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.when {
            When::Every { millis } => {
                let next = (t.timestamp_millis().div_euclid(*millis) + 1).checked_mul(*millis)?;
                DateTime::from_timestamp_millis(next)
            }
            When::Cron(cron) => self.next_cron(cron, t),
        }
    }

    /// The earliest matching instant strictly after `t`. Clock order is not instant order
    /// around a change of offset (in a zone that moves by 30 minutes, 02:20 skipped forwards can
    /// land after 02:35), so every match of a day counts, and the search goes one day past the
    /// first day with a match: no change of offset moves a time by a day.
    fn next_cron(&self, cron: &Cron, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let after = t.timestamp_millis();
        let start = jiff::Timestamp::from_millisecond(after).ok()?.to_zoned(self.tz.clone()).date();
        // The day before too: a time of that day may map past midnight (a skipped hour).
        let mut day = start.yesterday().ok()?;
        let mut best: Option<i64> = None;
        let mut days_left = SEARCH_DAYS;
        while days_left > 0 {
            if cron.matches_day(day) {
                for hour in (0..24).filter(|h| cron.hours & (1 << h) != 0) {
                    for minute in (0..60).filter(|m| cron.minutes & (1u64 << m) != 0) {
                        let local = day.at(hour, minute, 0, 0);
                        let at = self.tz.to_ambiguous_zoned(local).compatible().ok()?.timestamp().as_millisecond();
                        if at > after && best.is_none_or(|b| at < b) {
                            if best.is_none() {
                                days_left = days_left.min(2);
                            }
                            best = Some(at);
                        }
                    }
                }
            }
            day = day.tomorrow().ok()?;
            days_left -= 1;
        }
        DateTime::from_timestamp_millis(best?)
    }
}

impl Cron {
    fn matches_day(&self, day: Date) -> bool {
        if self.months & (1 << day.month()) == 0 {
            return false;
        }
        let dom = self.days & (1 << day.day()) != 0;
        let dow = self.weekdays & (1 << day.weekday().to_sunday_zero_offset()) != 0;
        if self.either_day { dom || dow } else { dom && dow }
    }
}

/// Slot times as the compact UTC text used in ids: `20270328T0130Z`.
pub fn slot_label(slot: DateTime<Utc>) -> String {
    slot.format("%Y%m%dT%H%MZ").to_string()
}

fn parse(expression: &str) -> Result<When, String> {
    let e = expression.trim();
    if e.is_empty() {
        return Err("must not be blank".into());
    }
    if e.len() > MAX_EXPRESSION_BYTES {
        return Err(format!("must be at most {MAX_EXPRESSION_BYTES} bytes"));
    }
    if let Some(inner) = e.strip_prefix("rate(").and_then(|r| r.strip_suffix(')')) {
        return parse_rate(inner);
    }
    parse_cron(e).map(|c| When::Cron(Box::new(c)))
}

fn parse_rate(inner: &str) -> Result<When, String> {
    let mut words = inner.split_whitespace();
    let (Some(n), Some(unit), None) = (words.next(), words.next(), words.next()) else {
        return Err("a rate is 'rate(<number> <minutes|hours|days>)'".into());
    };
    let n: i64 = digits(n)
        .map(i64::from)
        .filter(|n| *n >= 1)
        .ok_or_else(|| format!("rate: '{n}' is not a whole number of at least 1"))?;
    let unit_ms: i64 = match unit.to_ascii_lowercase().as_str() {
        "minute" | "minutes" => 60_000,
        "hour" | "hours" => 3_600_000,
        "day" | "days" => 86_400_000,
        other => return Err(format!("rate: unknown unit '{other}' (minutes, hours or days)")),
    };
    let millis = n.checked_mul(unit_ms).filter(|m| *m <= 366 * 86_400_000).ok_or("rate: at most 366 days")?;
    Ok(When::Every { millis })
}

/// A number written in ASCII digits only (`str::parse` also takes a sign: `+5`).
fn digits(text: &str) -> Option<u32> {
    (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())).then(|| text.parse().ok()).flatten()
}

const MONTHS: [&str; 12] = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];
const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
/// The most days each month has (February: 29).
const MONTH_DAYS: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

fn parse_cron(e: &str) -> Result<Cron, String> {
    if e.starts_with('@') {
        let written = match e {
            "@yearly" | "@annually" => "'0 0 1 1 *'",
            "@monthly" => "'0 0 1 * *'",
            "@weekly" => "'0 0 * * 0'",
            "@daily" | "@midnight" => "'0 0 * * *'",
            "@hourly" => "'0 * * * *'",
            _ => "its five fields",
        };
        return Err(format!("macros such as '{e}' are not supported: write {written}"));
    }
    let fields: Vec<&str> = e.split_whitespace().collect();
    let [minute, hour, dom, month, dow] = fields[..] else {
        return Err(format!(
            "a cron expression has five fields (minute hour day-of-month month day-of-week), this one has {}",
            fields.len()
        ));
    };
    let minutes = field("minute", minute, 0, 59, &[])?;
    let hours = field("hour", hour, 0, 23, &[])?;
    let days = field("day-of-month", dom, 1, 31, &[])?;
    let months = field("month", month, 1, 12, &MONTHS)?;
    // 7 is Sunday as well as 0.
    let weekdays = field("day-of-week", dow, 0, 7, &WEEKDAYS)?;
    let weekdays = (weekdays | (weekdays >> 7)) & 0x7f;
    let (dom_any, dow_any) = (dom == "*", dow == "*");
    if dow_any {
        let possible =
            (1..=12).any(|m| months & (1 << m) != 0 && (1..=MONTH_DAYS[m - 1]).any(|d| days & (1 << d) != 0));
        if !possible {
            return Err("day-of-month: no month of the expression has that day, so it would never run".into());
        }
    }
    Ok(Cron {
        minutes,
        hours: u32::try_from(hours).unwrap_or(0),
        days: u32::try_from(days).unwrap_or(0),
        months: u16::try_from(months).unwrap_or(0),
        weekdays: u8::try_from(weekdays).unwrap_or(0),
        either_day: !dom_any && !dow_any,
    })
}

/// One cron field as a bitset of its values from `min` to `max`.
fn field(name: &str, text: &str, min: u32, max: u32, names: &[&str]) -> Result<u64, String> {
    let value = |v: &str| -> Result<u32, String> {
        if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(v)) {
            // Months count from 1, weekdays from 0.
            return Ok(u32::try_from(i).unwrap_or(0) + min);
        }
        let n: u32 = digits(v).ok_or_else(|| match v {
            "?" => format!("{name} field: '?' (Quartz's \"no specific value\") is not supported: write '*'"),
            v if v.contains(['L', 'W', '#']) => format!(
                "{name} field: '{v}': 'L', 'W' and '#' (last day, nearest weekday, nth weekday) are not supported"
            ),
            v => format!("{name} field: '{v}' is not a number"),
        })?;
        if n < min || n > max {
            return Err(format!("{name} field: {n} is out of range {min}-{max}"));
        }
        Ok(n)
    };
    let mut set = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let s: u32 = digits(s).filter(|s| *s >= 1).ok_or_else(|| format!("{name} field: bad step '{s}'"))?;
                (r, s)
            }
            None => (part, 1),
        };
        let (lo, hi) = match range {
            "*" => (min, max),
            r => match r.split_once('-') {
                Some((a, b)) => (value(a)?, value(b)?),
                None if part.contains('/') => (value(r)?, max),
                None => {
                    let v = value(r)?;
                    (v, v)
                }
            },
        };
        if lo > hi {
            return Err(format!("{name} field: the range {lo}-{hi} runs backwards"));
        }
        for v in (lo..=hi).step_by(usize::try_from(step).unwrap_or(1)) {
            set |= 1 << v;
        }
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone as _;

    use super::*;

    fn slots(expression: &str, tz: &str) -> Slots {
        schedule(expression, tz).slots("/schedule").unwrap()
    }

    fn schedule(expression: &str, tz: &str) -> Schedule {
        Schedule {
            expression: expression.into(),
            time_zone: tz.into(),
            conversation_id: None,
            input: "go".into(),
            missed: Missed::RunOnce,
        }
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn next(expression: &str, tz: &str, from: &str) -> String {
        slots(expression, tz).next_after(at(from)).unwrap().to_rfc3339()
    }

    /// The slots after `from`, `n` of them.
    fn run(expression: &str, tz: &str, from: &str, n: usize) -> Vec<String> {
        let s = slots(expression, tz);
        let mut t = at(from);
        (0..n)
            .map(|_| {
                t = s.next_after(t).unwrap();
                t.to_rfc3339()
            })
            .collect()
    }

    fn fault(expression: &str) -> String {
        let mut errors = ValidationErrors::default();
        schedule(expression, "UTC").check("/schedule", &mut errors);
        assert_eq!(errors.0.len(), 1, "{expression}: {errors:?}");
        assert_eq!(errors.0[0].pointer, "/schedule/expression");
        errors.0[0].detail.clone()
    }

    #[test]
    fn rates_are_multiples_of_the_period_since_the_epoch() {
        assert_eq!(next("rate(15 minutes)", "UTC", "2027-01-05T10:07:30Z"), "2027-01-05T10:15:00+00:00");
        assert_eq!(next("rate(15 minutes)", "UTC", "2027-01-05T10:15:00Z"), "2027-01-05T10:30:00+00:00");
        assert_eq!(next("rate(1 day)", "Europe/Paris", "2027-01-05T10:07:30Z"), "2027-01-06T00:00:00+00:00");
        assert_eq!(next("rate(2 Hours)", "UTC", "2027-01-05T01:00:00Z"), "2027-01-05T02:00:00+00:00");
    }

    #[test]
    fn cron_fields_lists_ranges_steps_and_names() {
        assert_eq!(
            run("*/20 9-10 * * MON-FRI", "UTC", "2027-01-08T10:30:00Z", 4),
            [
                "2027-01-08T10:40:00+00:00",
                "2027-01-11T09:00:00+00:00",
                "2027-01-11T09:20:00+00:00",
                "2027-01-11T09:40:00+00:00"
            ]
        );
        assert_eq!(next("0 12 1 jan,Jul *", "UTC", "2027-01-01T12:00:00Z"), "2027-07-01T12:00:00+00:00");
        assert_eq!(next("5/30 * * * *", "UTC", "2027-01-01T00:06:00Z"), "2027-01-01T00:35:00+00:00");
        // 7 is Sunday: 2027-01-10 is one.
        assert_eq!(next("0 8 * * 7", "UTC", "2027-01-05T00:00:00Z"), "2027-01-10T08:00:00+00:00");
    }

    #[test]
    fn both_day_fields_restricted_match_either() {
        // The 15th (a Friday in January 2027) or any Monday.
        assert_eq!(
            run("0 0 15 * MON", "UTC", "2027-01-12T00:00:00Z", 3),
            ["2027-01-15T00:00:00+00:00", "2027-01-18T00:00:00+00:00", "2027-01-25T00:00:00+00:00"]
        );
    }

    #[test]
    fn the_29th_of_february_waits_for_a_leap_year() {
        assert_eq!(next("0 12 29 2 *", "UTC", "2027-03-01T00:00:00Z"), "2028-02-29T12:00:00+00:00");
    }

    #[test]
    fn local_times_follow_summer_time() {
        // Paris: 09:00 local is 08:00Z in winter and 07:00Z in summer (clocks change 2027-03-28).
        assert_eq!(
            run("0 9 * * *", "Europe/Paris", "2027-03-26T12:00:00Z", 3),
            ["2027-03-27T08:00:00+00:00", "2027-03-28T07:00:00+00:00", "2027-03-29T07:00:00+00:00"]
        );
        // New York changes on 2027-03-14 and 2027-11-07.
        assert_eq!(next("0 9 * * *", "America/New_York", "2027-03-13T15:00:00Z"), "2027-03-14T13:00:00+00:00");
        assert_eq!(next("0 9 * * *", "America/New_York", "2027-11-06T14:00:00Z"), "2027-11-07T14:00:00+00:00");
    }

    #[test]
    fn a_skipped_time_runs_forwards_and_a_doubled_time_runs_once() {
        // 02:30 does not exist in Paris on 2027-03-28: it runs at 03:30 summer time (01:30Z).
        assert_eq!(
            run("30 2 * * *", "Europe/Paris", "2027-03-27T12:00:00Z", 2),
            ["2027-03-28T01:30:00+00:00", "2027-03-29T00:30:00+00:00"]
        );
        // 01:30 happens twice in New York on 2027-11-07 (05:30Z and 06:30Z): once, the first.
        assert_eq!(
            run("30 1 * * *", "America/New_York", "2027-11-06T12:00:00Z", 2),
            ["2027-11-07T05:30:00+00:00", "2027-11-08T06:30:00+00:00"]
        );
        // Hourly across that fold: each wall-clock hour once, so 01:30 is not repeated.
        assert_eq!(
            run("30 * * * *", "America/New_York", "2027-11-07T04:00:00Z", 3),
            ["2027-11-07T04:30:00+00:00", "2027-11-07T05:30:00+00:00", "2027-11-07T07:30:00+00:00"]
        );
        // Hourly across the Paris gap: 02:30 maps onto 03:30, which runs once.
        assert_eq!(
            run("30 * * * *", "Europe/Paris", "2027-03-28T00:00:00Z", 3),
            ["2027-03-28T00:30:00+00:00", "2027-03-28T01:30:00+00:00", "2027-03-28T02:30:00+00:00"]
        );
        // Lord Howe Island moves by 30 minutes (02:00 +10:30 becomes 02:30 +11 on 2027-10-03):
        // 02:20 is skipped forwards to 02:50, after 02:35, and both run, in instant order.
        assert_eq!(
            run("20,35 2 * * *", "Australia/Lord_Howe", "2027-10-02T15:00:00Z", 4),
            [
                "2027-10-02T15:35:00+00:00",
                "2027-10-02T15:50:00+00:00",
                "2027-10-03T15:20:00+00:00",
                "2027-10-03T15:35:00+00:00"
            ]
        );
        // And back (02:00 +11 becomes 01:30 +10:30 on 2028-04-02): 01:40 happens twice, and
        // runs once, at its first occurrence.
        assert_eq!(
            run("40 1 * * *", "Australia/Lord_Howe", "2028-03-31T12:00:00Z", 3),
            ["2028-03-31T14:40:00+00:00", "2028-04-01T14:40:00+00:00", "2028-04-02T15:10:00+00:00"]
        );
    }

    #[test]
    fn bad_expressions_say_what_is_wrong() {
        assert!(fault("").contains("blank"));
        assert!(fault("0 9 * *").contains("five fields"), "{}", fault("0 9 * *"));
        assert!(fault("0 0 9 * * *").contains("this one has 6"));
        assert_eq!(fault("61 * * * *"), "minute field: 61 is out of range 0-59");
        assert_eq!(fault("0 24 * * *"), "hour field: 24 is out of range 0-23");
        assert_eq!(fault("0 0 0 * *"), "day-of-month field: 0 is out of range 1-31");
        assert!(fault("0 0 * FOO *").contains("'FOO' is not a number"));
        assert!(fault("0 0 * * MON-SUNDAY").contains("'SUNDAY'"));
        assert!(fault("0 17-9 * * *").contains("runs backwards"));
        assert!(fault("*/0 * * * *").contains("bad step"));
        assert!(fault("0 0 ? * MON").contains("write '*'"), "{}", fault("0 0 ? * MON"));
        assert!(fault("0 0 L * *").contains("'L', 'W' and '#'"));
        assert!(fault("0 0 * * 5#3").contains("nth weekday"));
        assert!(fault("0 0 15W * *").contains("nearest weekday"));
        assert_eq!(fault("@daily"), "macros such as '@daily' are not supported: write '0 0 * * *'");
        assert!(fault("@reboot").contains("its five fields"));
        // names with an L or a W in them are still names
        assert!(parse("0 9 * JUL WED").is_ok());
        assert!(fault("0 0 30 2 *").contains("never run"));
        assert!(fault("0 0 31 4,6 *").contains("never run"));
        assert!(fault("rate(0 minutes)").contains("at least 1"));
        assert!(fault("rate(5 weeks)").contains("unknown unit"));
        assert!(fault("rate(367 days)").contains("366 days"));
        assert!(fault("rate(5)").contains("rate("));
        // Digits only: a sign is not part of a cron number or a rate.
        assert!(fault("+5 * * * *").contains("'+5' is not a number"));
        assert!(fault("*/+5 * * * *").contains("bad step"));
        assert!(fault("rate(+5 minutes)").contains("'+5'"));
        assert!(fault(&"1,".repeat(200)).contains("at most 256 bytes"));
    }

    #[test]
    fn other_fields_are_checked_with_their_pointers() {
        let bad = Schedule {
            expression: "rate(5 minutes)".into(),
            time_zone: "Europe/Pariss".into(),
            conversation_id: Some("has spaces".into()),
            input: "  ".into(),
            missed: Missed::Skip,
        };
        let mut errors = ValidationErrors::default();
        bad.check("/schedule", &mut errors);
        let pointers: Vec<_> = errors.0.iter().map(|e| e.pointer.as_str()).collect();
        assert_eq!(pointers, ["/schedule/timeZone", "/schedule/conversationId", "/schedule/input"]);
        assert_eq!(errors.0[0].detail, "unknown time zone \"Europe/Pariss\"");
        let long = Schedule { input: "x".repeat(MAX_MESSAGE_TEXT_BYTES + 1), ..schedule("rate(1 hour)", "UTC") };
        assert!(long.slots("/s").unwrap_err().0[0].pointer == "/s/input");
        // a zone the database finds in another case is asked for as the database names it
        let mut errors = ValidationErrors::default();
        schedule("rate(1 hour)", "europe/paris").check("/schedule", &mut errors);
        let found: Vec<_> = errors.0.iter().map(|e| (e.pointer.as_str(), e.detail.as_str())).collect();
        assert_eq!(found, [("/schedule/timeZone", "write the zone as \"Europe/Paris\"")]);
    }

    #[test]
    fn defaults_read_and_write_back() {
        let mut s: Schedule =
            serde_json::from_value(serde_json::json!({"expression": "rate(5 minutes)", "input": "x"})).unwrap();
        assert_eq!((s.time_zone.as_str(), s.missed), ("", Missed::RunOnce), "the zone is the tenant's, to fill");
        assert!(fill_zone(&mut s.time_zone, DEFAULT_ZONE) && !fill_zone(&mut s.time_zone, "Europe/Paris"));
        assert_eq!(s.time_zone, "UTC", "a zone written is kept");
        assert_eq!(
            serde_json::to_value(&s).unwrap(),
            serde_json::json!({"expression": "rate(5 minutes)", "timeZone": "UTC", "input": "x"})
        );
        let unknown = serde_json::json!({"expression": "rate(5 minutes)", "input": "x", "every": 5});
        assert!(serde_json::from_value::<Schedule>(unknown).is_err());
        assert_eq!(schedule("0 9 * * 1-5", "Europe/Paris").spec(), "0 9 * * 1-5 @ Europe/Paris");
        assert_eq!(slot_label(Utc.with_ymd_and_hms(2027, 3, 28, 1, 30, 0).unwrap()), "20270328T0130Z");
    }

    /// Against a minute-by-minute walk, in UTC, over a year of every fifth expression.
    #[test]
    fn cron_slots_equal_a_brute_force_walk_in_utc() {
        for expression in
            ["*/7 3,15 * * *", "0 0 1,15 * 2", "45 23 * 2 SAT", "0 12 31 * *", "10-20/5 */6 * JUN-AUG MON-FRI"]
        {
            let s = slots(expression, "UTC");
            let cron = parse_cron(expression).unwrap();
            let mut t = at("2027-01-01T00:00:00Z");
            let mut expected = Vec::new();
            let mut minute = t;
            while expected.len() < 40 {
                minute += chrono::Duration::minutes(1);
                let civil = minute.naive_utc();
                let day = Date::new(
                    i16::try_from(chrono::Datelike::year(&civil)).unwrap(),
                    i8::try_from(chrono::Datelike::month(&civil)).unwrap(),
                    i8::try_from(chrono::Datelike::day(&civil)).unwrap(),
                )
                .unwrap();
                let (h, m) = (chrono::Timelike::hour(&civil), chrono::Timelike::minute(&civil));
                if cron.matches_day(day) && cron.hours & (1 << h) != 0 && cron.minutes & (1u64 << m) != 0 {
                    expected.push(minute);
                }
            }
            for want in expected {
                t = s.next_after(t).unwrap();
                assert_eq!(t, want, "{expression}");
            }
        }
    }
}
