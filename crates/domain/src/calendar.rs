//! Business-hours calendars: a tenant's named weekly opening hours in a time zone, with
//! holidays, which any trigger's time condition may name (`{"time": {"calendar": "support",
//! "outside": true}}`) instead of spelling out weekdays and hours. Set with the tenant
//! (`PATCH /tenants/{t}` `{"calendars": {...}}`), so a change of hours or a new holiday applies
//! to every trigger that names the calendar.
//!
//! ```json
//! {"support": {"timeZone": "Europe/Paris",
//!              "hours": {"MON": ["09:00-12:30", "13:30-18:00"], "SAT": ["10:00-14:00"]},
//!              "holidays": [{"date": "2026-12-25", "name": "Christmas"}]}}
//! ```
//!
//! A weekday not in `hours` is closed; each range is `[from, to)` in local wall-clock time,
//! `to` after `from` (`24:00` ends the day). A holiday closes its whole local date.

use std::collections::BTreeMap;

use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};

use crate::condition::time::{WEEKDAYS, clock_time, date};
use crate::validation::ValidationErrors;

/// Calendars a tenant keeps at most.
pub const MAX_CALENDARS: usize = 8;
/// Opening ranges of one weekday at most.
pub const MAX_RANGES_PER_DAY: usize = 6;
/// Holidays of one calendar at most: calendars are read with the tenant for every routed
/// message, so they stay small.
pub const MAX_HOLIDAYS: usize = 100;

/// A tenant's calendars by name.
pub type Calendars = BTreeMap<String, Calendar>;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Calendar {
    /// An IANA time zone name, as the tz database writes it. Written without one, a calendar
    /// takes its tenant's `timeZone`; empty only until then.
    #[serde(default)]
    pub time_zone: String,
    /// Opening hours per weekday (`MON`…`SUN`): `"HH:MM-HH:MM"` ranges.
    #[serde(default)]
    pub hours: BTreeMap<String, Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holidays: Vec<Holiday>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Holiday {
    /// The local date, `YYYY-MM-DD`.
    pub date: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Whether a calendar is open at a moment, as its time condition explains it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opening {
    pub open: bool,
    /// The local time it was judged at (`2026-12-25T10:00:00+01:00 Fri`).
    pub local: String,
    /// The holiday that closed the day, if one did.
    pub holiday: Option<String>,
}

/// Checks a tenant's calendars, each fault at its pointer under `prefix` (`/calendars`).
pub fn check_calendars(calendars: &Calendars, prefix: &str, errors: &mut ValidationErrors) {
    if calendars.len() > MAX_CALENDARS {
        errors.push(prefix, format!("at most {MAX_CALENDARS} calendars"));
    }
    for (name, calendar) in calendars {
        let good = (1..=32).contains(&name.len())
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        let at = format!("{prefix}/{name}");
        if !good {
            errors.push(at.clone(), "a calendar's name is 1 to 32 of a-z, 0-9, '-' and '_'");
        }
        calendar.check(&at, errors);
    }
}

impl Calendar {
    fn check(&self, at: &str, errors: &mut ValidationErrors) {
        if self.time_zone.is_empty() {
            let why = "a calendar needs a timeZone, or the tenant's timeZone to take";
            errors.push(format!("{at}/timeZone"), why);
        } else {
            crate::schedule::check_zone(&self.time_zone, &format!("{at}/timeZone"), errors);
        }
        for (day, ranges) in &self.hours {
            let pointer = format!("{at}/hours/{day}");
            if !WEEKDAYS.contains(&day.as_str()) {
                errors.push(pointer, "must be a weekday: SUN, MON, TUE, WED, THU, FRI or SAT");
                continue;
            }
            if ranges.len() > MAX_RANGES_PER_DAY {
                errors.push(pointer.clone(), format!("at most {MAX_RANGES_PER_DAY} ranges a day"));
            }
            for (i, range) in ranges.iter().enumerate() {
                if let Err(message) = parse_range(range) {
                    errors.push(format!("{pointer}/{i}"), message);
                }
            }
        }
        if self.holidays.len() > MAX_HOLIDAYS {
            errors.push(format!("{at}/holidays"), format!("at most {MAX_HOLIDAYS} holidays"));
        }
        for (i, holiday) in self.holidays.iter().enumerate() {
            if let Err(message) = date(&holiday.date) {
                errors.push(format!("{at}/holidays/{i}/date"), message);
            } else if self.holidays[..i].iter().any(|h| h.date == holiday.date) {
                errors.push(format!("{at}/holidays/{i}/date"), "this date is a holiday already");
            }
            if holiday.name.as_ref().is_some_and(|n| n.trim().is_empty() || n.chars().count() > 128) {
                errors.push(format!("{at}/holidays/{i}/name"), "must be 1 to 128 characters, not blank");
            }
        }
    }

    /// Whether the calendar is open at `now`: the local day is not a holiday and the local time
    /// falls in one of that weekday's ranges. `None` in a zone this host does not know.
    pub fn opening(&self, now: jiff::Timestamp) -> Option<Opening> {
        let tz = TimeZone::get(&self.time_zone).ok()?;
        let zoned = now.to_zoned(tz);
        let (day, time) = (zoned.date(), zoned.time());
        let minute = u16::try_from(i32::from(time.hour()) * 60 + i32::from(time.minute())).unwrap_or(0);
        let weekday = WEEKDAYS[usize::from(day.weekday().to_sunday_zero_offset().unsigned_abs())];
        let holiday = self.holidays.iter().find(|h| date(&h.date).is_ok_and(|d| d == day));
        let in_hours = self
            .hours
            .get(weekday)
            .into_iter()
            .flatten()
            .filter_map(|r| parse_range(r).ok())
            .any(|(from, to)| minute >= from && minute < to);
        Some(Opening {
            open: in_hours && holiday.is_none(),
            local: crate::condition::time::local_text(&zoned),
            holiday: holiday.map(|h| h.name.clone().unwrap_or_else(|| h.date.clone())),
        })
    }
}

/// `HH:MM-HH:MM` as minutes since local midnight, `from` before `to`.
fn parse_range(range: &str) -> Result<(u16, u16), String> {
    let bad = || format!("{range:?} is not a range of local time HH:MM-HH:MM");
    let (from, to) = range.split_once('-').ok_or_else(bad)?;
    let (from, to) = (clock_time(from.trim())?, clock_time(to.trim())?);
    if from >= to {
        return Err(format!("{range:?} must end after it starts (24:00 ends the day)"));
    }
    Ok((from, to))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn at(t: &str) -> jiff::Timestamp {
        t.parse().unwrap()
    }

    fn support() -> Calendar {
        serde_json::from_value(json!({
            "timeZone": "Europe/Paris",
            "hours": { "MON": ["09:00-12:30", "13:30-18:00"], "TUE": ["09:00-18:00"], "WED": ["09:00-18:00"],
                       "THU": ["09:00-18:00"], "FRI": ["09:00-17:00"], "SAT": ["10:00-14:00"] },
            "holidays": [{ "date": "2026-12-25", "name": "Christmas" }, { "date": "2027-01-01" }]
        }))
        .unwrap()
    }

    #[test]
    fn open_in_its_ranges_of_the_local_weekday_and_closed_on_holidays_and_across_summer_time() {
        let c = support();
        let open = |t: &str| c.opening(at(t)).unwrap().open;
        // Monday 2026-12-21: 08:30Z is 09:30 in Paris (open), 11:45Z is 12:45 (lunch, closed)
        assert!(open("2026-12-21T08:30:00Z") && !open("2026-12-21T11:45:00Z") && open("2026-12-21T12:30:00Z"));
        // Sunday is not in the hours; Saturday has its own
        assert!(!open("2026-12-27T10:00:00Z") && open("2026-12-26T09:30:00Z"));
        // Christmas (a Friday) is closed all day, named
        let christmas = c.opening(at("2026-12-25T10:00:00Z")).unwrap();
        assert_eq!((christmas.open, christmas.holiday.as_deref()), (false, Some("Christmas")));
        assert_eq!(christmas.local, "2026-12-25T11:00:00+01:00 Fri");
        // a holiday without a name is called by its date
        assert_eq!(c.opening(at("2027-01-01T10:00:00Z")).unwrap().holiday.as_deref(), Some("2027-01-01"));
        // Paris moves to summer time on 2027-03-28: 08:30Z is 09:30 on the Friday before, 10:30 on the Monday after,
        // and 07:30Z is 08:30 (closed) before, 09:30 (open) after
        assert!(!open("2027-03-26T07:30:00Z") && open("2027-03-29T07:30:00Z"));
        // the same hours in New York (summer time from 2027-03-14)
        let mut ny = support();
        ny.time_zone = "America/New_York".into();
        let ny_open = |t: &str| ny.opening(at(t)).unwrap().open;
        assert!(!ny_open("2027-03-12T13:30:00Z") && ny_open("2027-03-15T13:30:00Z"));
    }

    #[test]
    fn a_bad_calendar_is_refused_at_each_field() {
        let raw = json!({
            "Support Desk": { "timeZone": "UTC", "hours": {} },
            "ops": { "timeZone": "europe/paris", "hours": { "MONDAY": ["09:00-17:00"], "TUE": ["17:00-09:00", "9-5"] },
                     "holidays": [{ "date": "2026-02-30" }, { "date": "2026-12-25" }, { "date": "2026-12-25", "name": " " }] }
        });
        let calendars: Calendars = serde_json::from_value(raw).unwrap();
        let mut errors = ValidationErrors::default();
        check_calendars(&calendars, "/calendars", &mut errors);
        let pointers: Vec<&str> = errors.0.iter().map(|e| e.pointer.as_str()).collect();
        assert_eq!(
            pointers,
            [
                "/calendars/Support Desk",
                "/calendars/ops/timeZone",
                "/calendars/ops/hours/MONDAY",
                "/calendars/ops/hours/TUE/0",
                "/calendars/ops/hours/TUE/1",
                "/calendars/ops/holidays/0/date",
                "/calendars/ops/holidays/2/date",
                "/calendars/ops/holidays/2/name",
            ]
        );
        let mut fine = ValidationErrors::default();
        check_calendars(&BTreeMap::from([("support".to_owned(), support())]), "/calendars", &mut fine);
        assert!(fine.0.is_empty(), "{fine:?}");
    }
}
