//! Event times as calendar dates (UTC), for what the model reads: "since
//! 2026-10-03", "2023-05-08 14:02". Nothing for a time that is not a real
//! date (year 1970 to 9999), so hostile times print as nothing at all.

/// Days since 1970-01-01 of a time that is a real date.
pub fn day(ts: f64) -> Option<i64> {
    (ts.is_finite() && ts > 0.0 && ts <= 253_402_300_799.0).then(|| (ts / 86_400.0).floor() as i64)
}

/// `1683554160.0` → "2023-05-08".
pub fn date(ts: f64) -> Option<String> {
    let (y, m, d) = civil_from_days(day(ts)?);
    Some(format!("{y:04}-{m:02}-{d:02}"))
}

/// `1683554160.0` → "2023-05-08 13:56" (UTC, to the minute).
pub fn date_time(ts: f64) -> Option<String> {
    let date = date(ts)?;
    let minutes = (ts.rem_euclid(86_400.0) / 60.0).floor() as i64;
    Some(format!("{date} {:02}:{:02}", minutes / 60, minutes % 60))
}

/// (year, month 1–12, day 1–31) of a day count since 1970-01-01 (Howard
/// Hinnant's algorithm).
pub fn civil_from_days(z: i64) -> (i64, i64, i64) {
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
    fn dates_and_times() {
        assert_eq!(date(1_683_554_160.0).as_deref(), Some("2023-05-08"));
        assert_eq!(date(951_782_400.0).as_deref(), Some("2000-02-29"));
        assert_eq!(
            date_time(1_683_554_160.0).as_deref(),
            Some("2023-05-08 13:56")
        );
        assert_eq!(date_time(86_399.9).as_deref(), Some("1970-01-01 23:59"));
        for bad in [-5.0, 0.0, f64::NAN, f64::INFINITY, 1e300] {
            assert_eq!((date(bad), date_time(bad)), (None, None));
        }
    }
}
