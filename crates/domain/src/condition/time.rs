//! Time conditions: a node `{"time": {...}}` that holds when the moment a trigger is evaluated
//! falls in a window of local time — weekdays, a time-of-day range, a date range — in an IANA
//! time zone, or (`outside: true`) when it does not. Parsing and evaluation in one place; the
//! moment is the caller's (the router's clock), never read here.
//!
//! ```json
//! {"time": {"timeZone": "Europe/Paris", "weekdays": ["MON", "TUE", "WED", "THU", "FRI"],
//!           "from": "09:00", "to": "17:30", "dates": {"from": "2026-12-01", "to": "2026-12-24"},
//!           "outside": false}}
//! ```
//!
//! * `timeZone`: written without one, a window takes its tenant's `timeZone` when the trigger is
//!   stored ([`super::Conditions::fill_zone`]); a tenant without one cannot store it (a window
//!   in an unnamed zone would silently be UTC).
//! * `weekdays`: `SUN`…`SAT` (any case); absent, every day.
//! * `from` / `to`: `HH:MM`, the window `[from, to)` in local wall-clock time; `from` after `to`
//!   crosses midnight (`22:00`–`06:00`), and then the weekday is the one the window started on
//!   (Friday 22:00 to Saturday 06:00 is "Friday"). Either absent: the start or end of the day.
//!   Equal: refused (an empty window never holds; a whole day needs neither).
//! * `dates`: `{from, to}`, local dates, both included; either may be absent.
//! * Every part given must hold. Across a change of offset the local time is what a clock on the
//!   wall shows: 09:00 is 09:00 on both sides of a summer-time change.

use std::sync::OnceLock;

use jiff::civil::Date;
use jiff::tz::TimeZone;
use serde_json::{Map, Value};

pub(crate) const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
const KEYS: [&str; 6] = ["timeZone", "weekdays", "from", "to", "dates", "outside"];
/// The keys of a time condition that names a tenant's calendar instead of its own window.
const CALENDAR_KEYS: [&str; 2] = ["calendar", "outside"];

/// A compiled `time` node. Its zone is looked up when first judged, not when parsed: reading a
/// stored trigger (what every function does) needs no tz database, only judging and checking it
/// do ([`TimeWindow::zone_fault`] on write).
#[derive(Debug, Clone)]
pub(super) struct TimeWindow {
    zone: Box<str>,
    tz: OnceLock<Option<TimeZone>>,
    /// Where `timeZone` was written, for [`TimeWindow::zone_fault`].
    pub(super) pointer: Box<str>,
    /// Bit n: weekday n (0 is Sunday); all seven when absent.
    weekdays: u8,
    /// Minutes since local midnight.
    from: Option<u16>,
    to: Option<u16>,
    dates: (Option<Date>, Option<Date>),
    outside: bool,
    /// The tenant's calendar (`crate::calendar`) this condition names, when it names one
    /// instead of a window of its own (then the fields above are unused).
    calendar: Option<Box<str>>,
}

/// What a time node saw at a moment: its local time and whether the window holds there (and,
/// for a calendar, whether it was open and the holiday that closed it).
pub(super) struct Seen {
    pub(super) local: String,
    pub(super) held: bool,
    pub(super) open: Option<bool>,
    pub(super) holiday: Option<String>,
}

impl TimeWindow {
    /// Parses the object under `time` (written at `pointer`); errors are `(key under time,
    /// message)`. The zone's name is checked for shape only: [`TimeWindow::zone_fault`].
    pub(super) fn parse(value: &Value, pointer: &str) -> Result<Self, (String, String)> {
        let Value::Object(map) = value else {
            return Err((String::new(), "\"time\" must be an object with a \"timeZone\"".into()));
        };
        if map.contains_key("calendar") {
            return Self::parse_calendar(map, pointer);
        }
        if let Some(key) = map.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err((
                key.clone(),
                format!("unknown key {key:?} in a time condition: expected one of {}", KEYS.join(", ")),
            ));
        }
        let zone: Box<str> = match map.get("timeZone") {
            Some(Value::String(name)) if !name.is_empty() && name.len() <= 64 => name.as_str().into(),
            Some(_) => {
                return Err(("timeZone".into(), "must be an IANA time zone name such as \"Europe/Paris\"".into()));
            }
            // The tenant's, filled in when the trigger is stored (a fault until then).
            None => "".into(),
        };
        let weekdays = match map.get("weekdays") {
            None => 0x7f,
            Some(v) => weekdays(v).map_err(|m| ("weekdays".to_owned(), m))?,
        };
        let from = optional(map, "from", clock_time)?;
        let to = optional(map, "to", clock_time)?;
        if from.is_some() && from == to {
            return Err(("to".into(), "must differ from \"from\" (leave both out for the whole day)".into()));
        }
        let dates = match map.get("dates") {
            None => (None, None),
            Some(Value::Object(d)) => {
                if let Some(key) = d.keys().find(|k| !["from", "to"].contains(&k.as_str())) {
                    return Err((format!("dates/{key}"), "a date range has only \"from\" and \"to\"".into()));
                }
                let range = (optional(d, "from", date), optional(d, "to", date));
                let (Ok(start), Ok(end)) = range else {
                    let (key, message) = range.0.err().or(range.1.err()).unwrap_or_default();
                    return Err((format!("dates/{key}"), message));
                };
                if let (Some(a), Some(b)) = (start, end)
                    && a > b
                {
                    return Err(("dates/to".into(), "must not be before \"from\"".into()));
                }
                (start, end)
            }
            Some(_) => return Err(("dates".into(), "must be an object {\"from\": \"YYYY-MM-DD\", \"to\": …}".into())),
        };
        let outside = match map.get("outside") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(("outside".into(), "must be true or false".into())),
        };
        let pointer = format!("{pointer}/time/timeZone").into();
        Ok(Self { zone, tz: OnceLock::new(), pointer, weekdays, from, to, dates, outside, calendar: None })
    }

    /// `{"calendar": name, "outside"?}`: the tenant's calendar, open (or, `outside`, closed).
    fn parse_calendar(map: &Map<String, Value>, pointer: &str) -> Result<Self, (String, String)> {
        if let Some(key) = map.keys().find(|k| !CALENDAR_KEYS.contains(&k.as_str())) {
            return Err((
                key.clone(),
                format!(
                    "{key:?} is not allowed beside \"calendar\": the calendar has the hours (only \"outside\" goes with it)"
                ),
            ));
        }
        let name = match map.get("calendar") {
            Some(Value::String(n)) if (1..=32).contains(&n.len()) => n.as_str(),
            _ => return Err(("calendar".into(), "must be the name of one of the tenant's calendars".into())),
        };
        let outside = match map.get("outside") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(("outside".into(), "must be true or false".into())),
        };
        Ok(Self {
            zone: "".into(),
            tz: OnceLock::new(),
            pointer: format!("{pointer}/time/calendar").into(),
            weekdays: 0x7f,
            from: None,
            to: None,
            dates: (None, None),
            outside,
            calendar: Some(name.into()),
        })
    }

    /// The tenant calendar this condition names, if it names one.
    pub(super) fn calendar(&self) -> Option<&str> {
        self.calendar.as_deref()
    }

    fn tz(&self) -> Option<&TimeZone> {
        self.tz.get_or_init(|| TimeZone::get(&self.zone).ok()).as_ref()
    }

    /// Whether the window was written without a zone (and so takes its tenant's).
    pub(super) fn unzoned(&self) -> bool {
        self.calendar.is_none() && self.zone.is_empty()
    }

    /// Why the zone written cannot be used, when it cannot: what a write refuses.
    pub(super) fn zone_fault(&self) -> Option<String> {
        if self.calendar.is_some() {
            return None;
        }
        match self.tz() {
            // Not written: the tenant's is filled in ([`TimeWindow::unzoned`]).
            None if self.zone.is_empty() => None,
            None => Some(format!("unknown time zone {:?}", self.zone)),
            // found in another case: asked for as the tz database names it, as schedules are
            Some(tz) => tz.iana_name().filter(|n| **n != *self.zone).map(|n| format!("write the zone as {n:?}")),
        }
    }

    /// Whether the window holds at `now` (never, in a zone this host does not know, or for a
    /// calendar that `calendars` does not have).
    pub(super) fn holds(&self, now: jiff::Timestamp, calendars: Option<&crate::calendar::Calendars>) -> bool {
        self.seen(now, calendars).is_some_and(|s| s.held)
    }

    pub(super) fn seen(&self, now: jiff::Timestamp, calendars: Option<&crate::calendar::Calendars>) -> Option<Seen> {
        if let Some(name) = &self.calendar {
            let opening = calendars?.get(&**name)?.opening(now)?;
            let held = opening.open != self.outside;
            return Some(Seen { local: opening.local, held, open: Some(opening.open), holiday: opening.holiday });
        }
        let zoned = now.to_zoned(self.tz()?.clone());
        let (date, time) = (zoned.date(), zoned.time());
        let minute = u16::try_from(i32::from(time.hour()) * 60 + i32::from(time.minute())).unwrap_or(0);
        // The day the window is counted on: across midnight, the early hours are the day before's.
        let crosses = matches!((self.from, self.to), (Some(f), Some(t)) if f > t);
        let in_hours = match (self.from, self.to) {
            (None, None) => true,
            (Some(f), None) => minute >= f,
            (None, Some(t)) => minute < t,
            (Some(f), Some(t)) if f < t => minute >= f && minute < t,
            (Some(f), Some(t)) => minute >= f || minute < t,
        };
        let day = match (crosses, self.to) {
            (true, Some(t)) if minute < t => date.yesterday().unwrap_or(date),
            _ => date,
        };
        let on_day = self.weekdays & (1 << day.weekday().to_sunday_zero_offset()) != 0;
        let in_dates = self.dates.0.is_none_or(|a| day >= a) && self.dates.1.is_none_or(|b| day <= b);
        let inside = in_hours && on_day && in_dates;
        Some(Seen { local: local_text(&zoned), held: inside != self.outside, open: None, holiday: None })
    }
}

/// A zoned time as the tester shows it: `2026-12-31T23:30:00+01:00 Thu`. Written out by hand:
/// jiff's formatter would add some 60 KB to every function.
pub(crate) fn local_text(zoned: &jiff::Zoned) -> String {
    let (date, time) = (zoned.date(), zoned.time());
    let offset = zoned.offset().seconds();
    let (sign, offset) = if offset < 0 { ('-', -offset) } else { ('+', offset) };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{sign}{:02}:{:02} {}",
        date.year(),
        date.month(),
        date.day(),
        time.hour(),
        time.minute(),
        time.second(),
        offset / 3600,
        offset % 3600 / 60,
        title(WEEKDAYS[usize::from(date.weekday().to_sunday_zero_offset().unsigned_abs())]),
    )
}

fn optional<T>(
    map: &Map<String, Value>,
    key: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Option<T>, (String, String)> {
    match map.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => parse(s).map(Some).map_err(|m| (key.to_owned(), m)),
        Some(_) => Err((key.to_owned(), "must be a string".into())),
    }
}

fn weekdays(v: &Value) -> Result<u8, String> {
    let Value::Array(days) = v else { return Err("must be a list of weekdays such as [\"MON\", \"TUE\"]".into()) };
    if days.is_empty() {
        return Err("must name at least one weekday (leave it out for every day)".into());
    }
    let mut bits = 0u8;
    for d in days {
        let i = d
            .as_str()
            .and_then(|d| WEEKDAYS.iter().position(|w| w.eq_ignore_ascii_case(d)))
            .ok_or_else(|| format!("{d} is not a weekday (SUN, MON, TUE, WED, THU, FRI, SAT)"))?;
        bits |= 1 << i;
    }
    Ok(bits)
}

/// `HH:MM`, 00:00 to 23:59 (and 24:00 as the end of the day).
pub(crate) fn clock_time(s: &str) -> Result<u16, String> {
    let bad = || format!("{s:?} is not a time of day HH:MM (00:00 to 24:00)");
    let (h, m) = s.split_once(':').ok_or_else(bad)?;
    if h.len() != 2 || m.len() != 2 || !h.bytes().chain(m.bytes()).all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let (h, m): (u16, u16) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    match (h, m) {
        (24, 0) => Ok(24 * 60),
        (0..=23, 0..=59) => Ok(h * 60 + m),
        _ => Err(bad()),
    }
}

/// `YYYY-MM-DD`, a day the calendar has (parsed by hand, as [`clock_time`]).
pub(crate) fn date(s: &str) -> Result<Date, String> {
    let bad = || format!("{s:?} is not a date YYYY-MM-DD");
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| {
        b.get(r.clone()).filter(|d| d.iter().all(u8::is_ascii_digit)).and_then(|_| s[r].parse::<i16>().ok())
    };
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return Err(bad());
    }
    let (Some(y), Some(m), Some(d)) = (digits(0..4), digits(5..7), digits(8..10)) else { return Err(bad()) };
    let (Ok(m), Ok(d)) = (i8::try_from(m), i8::try_from(d)) else { return Err(bad()) };
    Date::new(y, m, d).map_err(|_| bad())
}

/// `MON` as `Mon`.
fn title(day: &str) -> String {
    let mut out = day[..1].to_owned();
    out.push_str(&day[1..].to_ascii_lowercase());
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn at(t: &str) -> jiff::Timestamp {
        t.parse().unwrap()
    }

    fn window(v: Value) -> TimeWindow {
        TimeWindow::parse(&v, "").unwrap()
    }

    impl TimeWindow {
        fn holds_at(&self, now: jiff::Timestamp) -> bool {
            self.holds(now, None)
        }
    }

    #[test]
    fn business_hours_follow_the_wall_clock_across_summer_time_in_two_zones() {
        let hours = |tz: &str| {
            window(
                json!({ "timeZone": tz, "weekdays": ["MON", "TUE", "WED", "THU", "FRI"], "from": "09:00", "to": "17:00" }),
            )
        };
        let (paris, new_york) = (hours("Europe/Paris"), hours("America/New_York"));
        // New York moves on 2027-03-14, Paris on 2027-03-28: 13:30Z is 08:30 in New York the week
        // before and 09:30 the week after; 07:30Z is 08:30 in Paris before, 09:30 after
        assert!(!new_york.holds_at(at("2027-03-08T13:30:00Z")));
        assert!(new_york.holds_at(at("2027-03-15T13:30:00Z")));
        assert!(!paris.holds_at(at("2027-03-22T07:30:00Z")));
        assert!(paris.holds_at(at("2027-03-29T07:30:00Z")));
        // between the two changes the offset between them is an hour less than usual
        assert!(paris.holds_at(at("2027-03-22T15:59:00Z")) && !paris.holds_at(at("2027-03-22T16:00:00Z")));
        assert!(new_york.holds_at(at("2027-03-22T20:59:00Z")) && !new_york.holds_at(at("2027-03-22T21:00:00Z")));
        // and back in autumn (Paris 2027-10-31, New York 2027-11-07)
        assert!(paris.holds_at(at("2027-11-01T08:00:00Z")) && !paris.holds_at(at("2027-10-29T06:30:00Z")));
        assert!(new_york.holds_at(at("2027-11-08T14:00:00Z")) && !new_york.holds_at(at("2027-11-05T12:30:00Z")));
        // weekends are outside
        assert!(!paris.holds_at(at("2027-03-27T10:00:00Z")));
    }

    #[test]
    fn outside_inverts_a_window_that_crosses_midnight_counts_from_its_start_and_dates_are_local() {
        let nights = window(json!({ "timeZone": "Europe/Paris", "weekdays": ["FRI"], "from": "22:00", "to": "06:00" }));
        assert!(nights.holds_at(at("2027-01-08T21:30:00Z")), "Friday 22:30");
        assert!(nights.holds_at(at("2027-01-09T04:00:00Z")), "Saturday 05:00 is Friday night");
        assert!(!nights.holds_at(at("2027-01-09T21:30:00Z")), "Saturday 22:30");
        assert!(!nights.holds_at(at("2027-01-08T04:00:00Z")), "Friday 05:00 is Thursday night");
        let closed = window(json!({ "timeZone": "Europe/Paris", "from": "09:00", "to": "18:00", "outside": true }));
        assert!(closed.holds_at(at("2027-01-08T19:00:00Z")) && !closed.holds_at(at("2027-01-08T10:00:00Z")));
        // a holiday range in local dates: 2026-12-31 23:30 in Paris is 22:30Z
        let holidays =
            window(json!({ "timeZone": "Europe/Paris", "dates": { "from": "2026-12-24", "to": "2026-12-31" } }));
        assert!(holidays.holds_at(at("2026-12-31T22:30:00Z")) && !holidays.holds_at(at("2026-12-31T23:30:00Z")));
        assert!(!holidays.holds_at(at("2026-12-23T22:59:00Z")) && holidays.holds_at(at("2026-12-23T23:00:00Z")));
        let seen = holidays.seen(at("2026-12-31T22:30:00Z"), None).unwrap();
        assert_eq!(seen.local, "2026-12-31T23:30:00+01:00 Thu");
        let west = window(json!({ "timeZone": "America/St_Johns" })).seen(at("2027-01-04T12:00:00Z"), None).unwrap();
        assert_eq!(west.local, "2027-01-04T08:30:00-03:30 Mon");
    }

    #[test]
    fn the_tenants_zone_is_written_into_every_window_that_names_none() {
        let written = json!({ "all": [
            { "field": "channel.platform", "operator": "eq", "value": "web" },
            { "any": [{ "time": { "from": "18:00", "to": "08:00" } }, { "time": { "calendar": "desk" } }] },
            { "time": { "timeZone": "Asia/Tokyo", "weekdays": ["SAT"] } },
        ] });
        let c = super::super::Conditions::parse(&written).unwrap();
        let missing: Vec<_> = c.missing_zones().into_iter().map(|f| f.pointer).collect();
        assert_eq!(missing, ["/all/1/any/0/time/timeZone"], "a calendar and a zone written need none");
        let filled = c.fill_zone("Europe/Paris").unwrap();
        let raw = filled.as_json();
        assert_eq!(raw["all"][1]["any"][0]["time"]["timeZone"], "Europe/Paris");
        assert_eq!(raw["all"][1]["any"][1]["time"], json!({ "calendar": "desk" }));
        assert_eq!(raw["all"][2]["time"]["timeZone"], "Asia/Tokyo");
        assert!(filled.missing_zones().is_empty() && filled.fill_zone("UTC").is_none(), "nothing left to fill");
    }

    #[test]
    fn bad_windows_name_the_key_at_fault() {
        let fault = |v: Value| TimeWindow::parse(&v, "").unwrap_err();
        assert_eq!(fault(json!({ "timeZone": "" })).0, "timeZone");
        // written without a zone: the tenant's is filled in, and until then it never holds
        let unzoned = window(json!({ "weekdays": ["MON"] }));
        assert!(unzoned.unzoned() && unzoned.zone_fault().is_none() && !unzoned.holds_at(at("2027-01-04T12:00:00Z")));
        // a zone is looked up when checked or judged, not when read
        let mars = window(json!({ "timeZone": "Mars/Olympus" }));
        assert_eq!(mars.zone_fault().as_deref(), Some("unknown time zone \"Mars/Olympus\""));
        assert!(!mars.holds_at(at("2027-01-04T12:00:00Z")), "an unknown zone never holds");
        assert_eq!(window(json!({ "timeZone": "Europe/Paris" })).zone_fault(), None);
        let lower = window(json!({ "timeZone": "europe/paris" }));
        assert_eq!(lower.zone_fault().as_deref(), Some("write the zone as \"Europe/Paris\""));
        assert_eq!(fault(json!({ "timeZone": "UTC", "dates": { "from": "2027-02-29" } })).0, "dates/from");
        assert_eq!(fault(json!({ "timeZone": "UTC", "weekdays": ["MON", "FUNDAY"] })).0, "weekdays");
        assert_eq!(fault(json!({ "timeZone": "UTC", "weekdays": [] })).0, "weekdays");
        assert_eq!(fault(json!({ "timeZone": "UTC", "from": "9:00" })).0, "from");
        assert_eq!(fault(json!({ "timeZone": "UTC", "to": "24:01" })).0, "to");
        assert_eq!(fault(json!({ "timeZone": "UTC", "from": "+9:00" })).0, "from");
        assert_eq!(fault(json!({ "timeZone": "UTC", "from": "10:00", "to": "10:00" })).0, "to");
        assert_eq!(
            fault(json!({ "timeZone": "UTC", "dates": { "from": "2026-12-31", "to": "2026-12-01" } })).0,
            "dates/to"
        );
        assert_eq!(fault(json!({ "timeZone": "UTC", "dates": { "from": "31/12/2026" } })).0, "dates/from");
        assert_eq!(fault(json!({ "timeZone": "UTC", "dates": { "until": "2026-12-31" } })).0, "dates/until");
        assert_eq!(fault(json!({ "timeZone": "UTC", "outside": "yes" })).0, "outside");
        assert_eq!(fault(json!({ "timeZone": "UTC", "hours": [9, 17] })).0, "hours");
    }
}
