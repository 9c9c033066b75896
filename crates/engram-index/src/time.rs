//! When something was said, as words a question uses: "what did she
//! paint on October 13, 2023?", "when did he go camping in June?". Each
//! item's event time is indexed as its date in words (UTC), searched with
//! the same terms as its text.

/// Month names, January first.
pub const MONTHS: [&str; 12] = [
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

const WEEKDAYS: [&str; 7] = [
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
];

/// Every word [`words`] writes that is not a number: the month and
/// weekday names.
pub fn names() -> impl Iterator<Item = &'static str> {
    MONTHS.into_iter().chain(WEEKDAYS)
}

/// Days since 1970-01-01 of a time that is a real date (year 1970 to 9999).
fn day(ts: f64) -> Option<i64> {
    (ts.is_finite() && ts > 0.0 && ts <= 253_402_300_799.0).then(|| (ts / 86_400.0).floor() as i64)
}

/// `1683554160.0` → "Monday 8 May 2023"; nothing for times that are not
/// real dates.
pub fn words(ts: f64) -> String {
    let Some(days) = day(ts) else {
        return String::new();
    };
    let (y, m, d) = civil_from_days(days);
    let weekday = WEEKDAYS[days.rem_euclid(7) as usize];
    format!("{weekday} {d} {} {y}", MONTHS[(m - 1) as usize])
}

/// `1683554160.0` → "2023-05-08" (UTC); nothing for times that are not
/// real dates.
pub fn date(ts: f64) -> Option<String> {
    let (y, m, d) = civil_from_days(day(ts)?);
    Some(format!("{y:04}-{m:02}-{d:02}"))
}

/// (year, month 1–12, day 1–31) of a day count since 1970-01-01 (Howard
/// Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_in_words() {
        assert_eq!(words(1_683_554_160.0), "Monday 8 May 2023");
        assert_eq!(words(1.0), "Thursday 1 January 1970");
        assert_eq!(words(951_782_400.0), "Tuesday 29 February 2000");
        assert_eq!(words(0.0), "");
        assert_eq!(words(f64::NAN), "");
        assert_eq!(words(1e300), "");
        assert_eq!(date(1_683_554_160.0).as_deref(), Some("2023-05-08"));
        assert_eq!(date(951_782_400.0).as_deref(), Some("2000-02-29"));
        assert_eq!(date(-5.0), None);
    }
}
