//! Five-field cron expressions: parsed into one bitset per field, and which days they match.
//! Civil dates only; time zones are the walk's business (`walk.rs`).

/// A cron expression compiled: one bit per value each field matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Cron {
    /// Bits 0-59.
    pub(super) minutes: u64,
    /// Bits 0-23.
    pub(super) hours: u32,
    /// Bits 1-31.
    days: u32,
    /// Bits 1-12.
    months: u16,
    /// Bits 0-6, Sunday 0 (a 7 written in the field is folded onto it).
    weekdays: u8,
    /// Both day fields restricted: a day matches if either does.
    either_day: bool,
}

/// How far apart two matching days may be. The walk looks a little further (`walk.rs`).
pub(super) const MAX_GAP_DAYS: u32 = 3_653;

const ALL_DAYS: u32 = 0xffff_fffe;
const ALL_WEEKDAYS: u8 = 0x7f;
/// Longest each month can be, February in a leap year.
const MONTH_DAYS: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
const MONTH_NAMES: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// One field's name and values; `names[i]` stands for `min + i`.
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTE: Field = Field { name: "minute", min: 0, max: 59, names: &[] };
const HOUR: Field = Field { name: "hour", min: 0, max: 23, names: &[] };
const DAY: Field = Field { name: "day-of-month", min: 1, max: 31, names: &[] };
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    names: &["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"],
};
const WEEKDAY: Field =
    Field { name: "day-of-week", min: 0, max: 7, names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"] };

impl Cron {
    /// Parses a trimmed expression that is neither a rate nor a macro; one fault per field at
    /// fault, or about the fields together.
    pub(super) fn parse(text: &str) -> Result<Self, Vec<String>> {
        let fields: Vec<&str> = text.split_whitespace().collect();
        let &[minute, hour, day, month, weekday] = fields.as_slice() else {
            return Err(vec![field_count(fields.len())]);
        };
        let mut faults = Vec::new();
        let mut parse = |field: &Field, text: &str| {
            parse_field(field, text).unwrap_or_else(|fault| {
                faults.push(format!("{} field: {fault}", field.name));
                0
            })
        };
        let minutes = parse(&MINUTE, minute);
        let hours = parse(&HOUR, hour);
        let days = parse(&DAY, day);
        let months = parse(&MONTH, month);
        let weekdays = parse(&WEEKDAY, weekday);
        if !faults.is_empty() {
            return Err(faults);
        }
        // The casts keep the bits each field's range allows.
        let cron = Self {
            minutes,
            hours: hours as u32,
            days: days as u32,
            months: months as u16,
            weekdays: ((weekdays | weekdays >> 7) & u64::from(ALL_WEEKDAYS)) as u8,
            either_day: !day.starts_with('*') && !weekday.starts_with('*'),
        };
        cron.check_days(day, month, weekday).map_err(|fault| vec![fault])?;
        Ok(cron)
    }

    /// Whether the day fields match a date (`month` 1-12, `day` 1-31, `weekday` 0-6 from Sunday).
    pub(super) fn matches_day(&self, month: u32, day: u32, weekday: u32) -> bool {
        if self.months & (1 << month) == 0 {
            return false;
        }
        let (day, weekday) = (self.days & (1 << day) != 0, self.weekdays & (1 << weekday) != 0);
        if self.either_day { day || weekday } else { day && weekday }
    }

    /// Refuses day fields that must both match and never, or hardly ever, do. Under the
    /// either-day rule the weekdays alone match every week.
    fn check_days(&self, day: &str, month: &str, weekday: &str) -> Result<(), String> {
        if self.either_day {
            return Ok(());
        }
        let months = || (1..=12u32).filter(|m| self.months & (1 << m) != 0);
        // Bits 1..=n for a month of n days.
        let possible = months().any(|m| u64::from(self.days) & ((1 << (MONTH_DAYS[m as usize - 1] + 1)) - 2) != 0);
        if !possible {
            let names: Vec<&str> = months().map(|m| MONTH_NAMES[m as usize - 1]).collect();
            let listed = match names.split_last() {
                Some((last, [])) => (*last).to_owned(),
                Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                None => String::new(),
            };
            return Err(format!("day-of-month {day} never occurs in {listed}"));
        }
        // A date in a given month meets every weekday within a few years, and a weekday every
        // month: only a rare date paired with a rare weekday can be years apart.
        if self.days != ALL_DAYS && self.weekdays != ALL_WEEKDAYS && self.largest_gap().is_none_or(|g| g > MAX_GAP_DAYS)
        {
            return Err(format!(
                "day-of-month {day} and day-of-week {weekday} in month {month} match together less than once every \
                 10 years (a day must match both, as one of them starts with '*')"
            ));
        }
        Ok(())
    }

    /// The most days from one matching date to the next, over the Gregorian calendar's 400-year
    /// cycle (which is whole weeks, so it repeats exactly); `None` when no date matches.
    fn largest_gap(&self) -> Option<u32> {
        const CYCLE_DAYS: u32 = 146_097;
        let (mut first, mut last, mut largest) = (None, None, 0);
        let (mut index, mut weekday) = (0u32, 6u32); // 2000-01-01 was a Saturday
        for year in 2000..2400u32 {
            let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
            for month in 1..=12u32 {
                let length = match month {
                    2 if !leap => 28,
                    _ => MONTH_DAYS[month as usize - 1],
                };
                for day in 1..=length {
                    if self.matches_day(month, day, weekday) {
                        if let Some(previous) = last {
                            largest = largest.max(index - previous);
                        }
                        first = first.or(Some(index));
                        last = Some(index);
                    }
                    index += 1;
                    weekday = (weekday + 1) % 7;
                }
            }
        }
        Some(largest.max(first? + CYCLE_DAYS - last?))
    }
}

fn field_count(n: usize) -> String {
    const FIELDS: &str = "expected 5 (minute hour day-of-month month day-of-week)";
    match n {
        1 => format!("has 1 field; {FIELDS}"),
        6 | 7 => format!("has {n} fields; {FIELDS}: seconds and year fields are not supported"),
        _ => format!("has {n} fields; {FIELDS}"),
    }
}

/// A field's values as bits (bit v for value v).
fn parse_field(field: &Field, text: &str) -> Result<u64, String> {
    let mut bits = 0;
    for item in text.split(',') {
        bits |= parse_item(field, item).map_err(|fault| match item.is_empty() {
            true => format!("empty item in '{text}'"),
            false => fault,
        })?;
    }
    Ok(bits)
}

/// One list item: `*`, `a` or `a-b`, each optionally with `/s`.
fn parse_item(field: &Field, item: &str) -> Result<u64, String> {
    if item.contains('?') {
        return Err("'?' is not supported: write '*'".to_owned());
    }
    if item.contains('#') {
        return Err("'#' (the nth weekday of the month) is not supported".to_owned());
    }
    let (range, step) = match item.split_once('/') {
        None => (item, None),
        Some((range, step)) => (range, Some(parse_step(step)?)),
    };
    let (low, high) = if range == "*" {
        (field.min, field.max)
    } else if let Some((low, high)) = range.split_once('-') {
        let (low, high) = (parse_value(field, low, item)?, parse_value(field, high, item)?);
        if low > high {
            let hint = match field.name == WEEKDAY.name {
                true => " (ranges do not wrap around; Sunday is 0 and also 7)",
                false => "",
            };
            return Err(format!("range {range} is not ascending{hint}"));
        }
        (low, high)
    } else {
        let value = parse_value(field, range, item)?;
        (value, if step.is_some() { field.max } else { value })
    };
    let step = usize::try_from(step.unwrap_or(1)).unwrap_or(usize::MAX);
    Ok((low..=high).step_by(step).fold(0, |bits, v| bits | 1 << v))
}

fn parse_step(step: &str) -> Result<u32, String> {
    if step.is_empty() || !step.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("step '{step}' is not a whole number"));
    }
    // A step beyond u32 selects only the start, as any step longer than the range does.
    match step.parse::<u32>().unwrap_or(u32::MAX) {
        0 => Err("step 0 must be at least 1".to_owned()),
        s => Ok(s),
    }
}

/// One number or name of `item`.
fn parse_value(field: &Field, token: &str, item: &str) -> Result<u32, String> {
    if token.is_empty() {
        return Err(format!("'{item}' is missing a number"));
    }
    if token.bytes().all(|b| b.is_ascii_digit()) {
        return match token.parse::<u32>() {
            Ok(v) if (field.min..=field.max).contains(&v) => Ok(v),
            _ => Err(format!("{token} is out of range {}-{}", field.min, field.max)),
        };
    }
    if let Some(i) = field.names.iter().position(|name| name.eq_ignore_ascii_case(token)) {
        return Ok(field.min + i as u32);
    }
    // Quartz's and EventBridge's extensions: `L`, `L-3`, `5L`, `LW`, `15W`.
    let upper = token.to_ascii_uppercase();
    let digits_then = |suffix: char| upper.strip_suffix(suffix).is_some_and(|d| d.bytes().all(|b| b.is_ascii_digit()));
    if upper == "LW" || digits_then('L') {
        return Err("'L' (the last day) is not supported".to_owned());
    }
    if digits_then('W') {
        return Err("'W' (the nearest weekday) is not supported".to_owned());
    }
    if token == "*" {
        return Err(format!("'{item}': '*' stands alone or before a step, as in '*/5'"));
    }
    match (field.names.first(), field.names.last()) {
        (Some(first), Some(last)) if token.bytes().all(|b| b.is_ascii_alphabetic()) => {
            Err(format!("unknown name '{token}' (expected {first}-{last})"))
        }
        _ => Err(format!("'{token}' is not a number")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(expression: &str) -> String {
        Cron::parse(expression).unwrap_err().join(" | ")
    }

    fn values(bits: u64) -> Vec<u32> {
        (0..64).filter(|v| bits & (1 << v) != 0).collect()
    }

    #[test]
    fn it_wants_exactly_five_fields() {
        assert_eq!(fault("*"), "has 1 field; expected 5 (minute hour day-of-month month day-of-week)");
        assert_eq!(fault("0 9 * *"), "has 4 fields; expected 5 (minute hour day-of-month month day-of-week)");
        assert_eq!(
            fault("0 0 9 * * *"),
            "has 6 fields; expected 5 (minute hour day-of-month month day-of-week): \
             seconds and year fields are not supported"
        );
        assert_eq!(
            fault("0 0 9 * * ? 2027"),
            "has 7 fields; expected 5 (minute hour day-of-month month day-of-week): \
             seconds and year fields are not supported"
        );
    }

    #[test]
    fn values_must_be_in_their_field_range() {
        assert_eq!(fault("61 * * * *"), "minute field: 61 is out of range 0-59");
        assert_eq!(fault("0 24 * * *"), "hour field: 24 is out of range 0-23");
        assert_eq!(fault("0 0 0 * *"), "day-of-month field: 0 is out of range 1-31");
        assert_eq!(fault("0 0 32 * *"), "day-of-month field: 32 is out of range 1-31");
        assert_eq!(fault("0 0 * 13 *"), "month field: 13 is out of range 1-12");
        assert_eq!(fault("0 0 * * 8"), "day-of-week field: 8 is out of range 0-7");
        assert_eq!(fault("99999999999 * * * *"), "minute field: 99999999999 is out of range 0-59");
        // every faulty field is reported, in order
        assert_eq!(
            fault("60 24 * * *"),
            "minute field: 60 is out of range 0-59 | hour field: 24 is out of range 0-23"
        );
    }

    #[test]
    fn ranges_must_ascend_and_steps_be_whole_and_positive() {
        assert_eq!(fault("30-10 * * * *"), "minute field: range 30-10 is not ascending");
        assert_eq!(
            fault("0 0 * * FRI-MON"),
            "day-of-week field: range FRI-MON is not ascending (ranges do not wrap around; Sunday is 0 and also 7)"
        );
        assert_eq!(fault("*/0 * * * *"), "minute field: step 0 must be at least 1");
        assert_eq!(fault("*/ * * * *"), "minute field: step '' is not a whole number");
        assert_eq!(fault("*/x * * * *"), "minute field: step 'x' is not a whole number");
        assert_eq!(fault("1/2/3 * * * *"), "minute field: step '2/3' is not a whole number");
        assert_eq!(fault("-5 * * * *"), "minute field: '-5' is missing a number");
        assert_eq!(fault("5- * * * *"), "minute field: '5-' is missing a number");
        assert_eq!(fault("*-5 * * * *"), "minute field: '*-5': '*' stands alone or before a step, as in '*/5'");
        assert_eq!(fault("1,,2 * * * *"), "minute field: empty item in '1,,2'");
        assert_eq!(fault("1, * * * *"), "minute field: empty item in '1,'");
        assert_eq!(fault("1.5 * * * *"), "minute field: '1.5' is not a number");
    }

    #[test]
    fn names_are_for_months_and_weekdays_only() {
        assert_eq!(fault("0 0 * JANU *"), "month field: unknown name 'JANU' (expected JAN-DEC)");
        assert_eq!(fault("0 0 * * MOO"), "day-of-week field: unknown name 'MOO' (expected SUN-SAT)");
        assert_eq!(fault("0 0 MON * *"), "day-of-month field: 'MON' is not a number");
        assert_eq!(fault("0 noon * * *"), "hour field: 'noon' is not a number");
    }

    #[test]
    fn quartz_and_eventbridge_extensions_are_refused_by_name() {
        assert_eq!(fault("0 9 ? * MON"), "day-of-month field: '?' is not supported: write '*'");
        assert_eq!(fault("0 9 L * *"), "day-of-month field: 'L' (the last day) is not supported");
        assert_eq!(fault("0 9 L-3 * *"), "day-of-month field: 'L' (the last day) is not supported");
        assert_eq!(fault("0 9 LW * *"), "day-of-month field: 'L' (the last day) is not supported");
        assert_eq!(fault("0 9 * * 5L"), "day-of-week field: 'L' (the last day) is not supported");
        assert_eq!(fault("0 9 15W * *"), "day-of-month field: 'W' (the nearest weekday) is not supported");
        assert_eq!(fault("0 9 * * MON#2"), "day-of-week field: '#' (the nth weekday of the month) is not supported");
        // JUL holds an L and is a month all the same
        assert!(Cron::parse("0 9 * JUL *").is_ok());
    }

    #[test]
    fn lists_ranges_steps_and_names_compile_to_their_values() {
        let cron = Cron::parse("*/15 9-17/4 1,15,31 jan-Mar,DEC 1-5").unwrap();
        assert_eq!(values(cron.minutes), [0, 15, 30, 45]);
        assert_eq!(values(cron.hours.into()), [9, 13, 17]);
        assert_eq!(values(cron.days.into()), [1, 15, 31]);
        assert_eq!(values(cron.months.into()), [1, 2, 3, 12]);
        assert_eq!(values(cron.weekdays.into()), [1, 2, 3, 4, 5]);
        // `a/s` runs to the field's end; a step past the range keeps its start
        let cron = Cron::parse("5/20 */100 * * *").unwrap();
        assert_eq!(values(cron.minutes), [5, 25, 45]);
        assert_eq!(values(cron.hours.into()), [0]);
        // 0 and 7 are both Sunday; a range may end on 7
        assert_eq!(values(Cron::parse("0 0 * * 7").unwrap().weekdays.into()), [0]);
        assert_eq!(values(Cron::parse("0 0 * * FRI-7").unwrap().weekdays.into()), [0, 5, 6]);
        assert_eq!(values(Cron::parse("0 0 * * */2").unwrap().weekdays.into()), [0, 2, 4, 6]);
        assert_eq!(values(Cron::parse("0 0 * * sun,Sat").unwrap().weekdays.into()), [0, 6]);
    }

    #[test]
    fn restricted_day_fields_match_either_and_a_star_makes_both_apply() {
        // 2027-01-01 was a Friday (5); 2027-01-13 a Wednesday (3)
        let either = Cron::parse("0 0 13 * FRI").unwrap();
        assert!(either.matches_day(1, 1, 5), "any Friday");
        assert!(either.matches_day(1, 13, 3), "any 13th");
        assert!(!either.matches_day(1, 14, 4));
        let weekday_only = Cron::parse("0 0 * * FRI").unwrap();
        assert!(weekday_only.matches_day(1, 1, 5) && !weekday_only.matches_day(1, 13, 3));
        let day_only = Cron::parse("0 0 13 * *").unwrap();
        assert!(day_only.matches_day(1, 13, 3) && !day_only.matches_day(1, 1, 5));
        // a stepped star is unrestricted too (crontab(5): "don't start with *"): both must match
        let both = Cron::parse("0 0 */2 * FRI").unwrap();
        assert!(both.matches_day(1, 1, 5), "an odd Friday");
        assert!(!both.matches_day(1, 8, 5), "an even Friday");
        assert!(!both.matches_day(1, 13, 3), "an odd Wednesday");
        // the month always applies
        assert!(!either.matches_day(2, 13, 6));
        assert!(!Cron::parse("0 0 13 3 FRI").unwrap().matches_day(1, 1, 5));
    }

    #[test]
    fn day_fields_that_never_or_hardly_ever_match_are_refused() {
        assert_eq!(fault("0 0 30 2 *"), "day-of-month 30 never occurs in February");
        assert_eq!(fault("0 0 31 4,6 *"), "day-of-month 31 never occurs in April or June");
        assert_eq!(fault("0 0 30-31 FEB,APR,JUN *"), "day-of-month 30-31 never occurs in February, April or June");
        assert_eq!(fault("0 0 31 2 */2"), "day-of-month 31 never occurs in February");
        // February 29th is at most 8 years away (2096 to 2104)
        assert!(Cron::parse("0 12 29 2 *").is_ok());
        // January 1st on a Sunday can be 11 years away
        assert_eq!(
            fault("0 0 1 1 */7"),
            "day-of-month 1 and day-of-week */7 in month 1 match together less than once every 10 years \
             (a day must match both, as one of them starts with '*')"
        );
        // restricted both: either matches, so a Monday in February is enough
        assert!(Cron::parse("0 0 30 2 MON").is_ok());
        // a date meets a weekday often enough with a wider weekday set
        assert!(Cron::parse("0 0 1 1 */2").is_ok());
    }

    #[test]
    fn the_largest_gap_is_measured_over_the_whole_cycle() {
        assert_eq!(Cron::parse("0 0 * * *").unwrap().largest_gap(), Some(1));
        assert_eq!(Cron::parse("0 0 * * 1").unwrap().largest_gap(), Some(7));
        assert_eq!(Cron::parse("0 0 1 1 *").unwrap().largest_gap(), Some(366));
        assert_eq!(Cron::parse("0 0 29 2 *").unwrap().largest_gap(), Some(8 * 365 + 1));
    }
}
