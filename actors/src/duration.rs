//! Durations as the API and configuration write them: a whole number and one
//! unit, `s`, `m`, `h` or `d` (`"90m"`, `"36h"`, `"3d"`).

use std::time::Duration;

/// Parses `"<n><unit>"`; the message says what was wrong.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let bad = || {
        format!(
            "{text:?} is not a duration: write a whole number and a unit, like \"90m\", \"36h\" or \"3d\" (units s, m, h, d)"
        )
    };
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().map_err(|_| bad())?;
    let secs = match unit {
        "s" => Some(n),
        "m" => n.checked_mul(60),
        "h" => n.checked_mul(3600),
        "d" => n.checked_mul(86_400),
        _ => None,
    }
    .ok_or_else(bad)?;
    Ok(Duration::from_secs(secs))
}

/// The shortest exact form: `"3d"`, `"36h"`, `"90m"`, `"45s"`.
pub fn format(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => "0s".to_owned(),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats_the_api_forms() {
        for (text, secs) in [
            ("90m", 5400),
            ("36h", 129_600),
            ("3d", 259_200),
            ("45s", 45),
            ("0s", 0),
        ] {
            assert_eq!(parse(text).unwrap(), Duration::from_secs(secs), "{text}");
            assert_eq!(format(Duration::from_secs(secs)), text);
        }
        assert_eq!(format(Duration::from_secs(7200)), "2h");
    }

    #[test]
    fn refuses_what_is_not_a_duration() {
        for bad in [
            "",
            "3",
            "d",
            "3 days",
            "1.5h",
            "-1h",
            "3w",
            "99999999999999999999d",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains("not a duration"), "{bad}: {err}");
        }
    }
}
