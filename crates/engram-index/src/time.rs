//! When something was said, as words a question uses: "what did she
//! paint on October 13, 2023?", "when did he go camping in June?". Each
//! item's event time is indexed as its date in words (UTC), searched with
//! the same terms as its text.

use engram_core::dates::{civil_from_days, day};

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
    }
}
