//! Names and labels the agent controls, made safe to print on the owner's
//! terminal. A file name or message id may hold newlines and escape
//! sequences (to fake lines or drive the terminal), or text shaped like
//! our own output (`x | +1 -1 (modified)` in `diff --stat`). Such text is
//! printed quoted with C escapes, as `git` does with `core.quotePath` and
//! `ls -b`; ordinary names are printed as they are.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

/// `s` as is when it is plain, else in double quotes with escapes.
pub fn quote(s: &str) -> String {
    quote_bytes(s.as_bytes())
}

/// `s` always in double quotes, with the escapes of [`quote`]: for text
/// the agent chose (a label, or an id in an error message), so that where
/// it starts and ends is never in doubt.
pub fn quoted(s: &str) -> String {
    let q = quote(s);
    if q != s { q } else { format!("\"{s}\"") }
}

/// A file name or path, quoted as [`quote`] does; bytes that are not
/// UTF-8 are written as octal escapes (`\377`, as `git` and `ls -b` do),
/// which bash's `$'...'` turns back into the same bytes.
pub fn quote_name(name: impl AsRef<OsStr>) -> String {
    quote_bytes(name.as_ref().as_bytes())
}

/// A byte count for people: `812 B`, `4.2 MiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{n} B") } else { format!("{v:.1} {}", UNITS[unit]) }
}

fn quote_bytes(bytes: &[u8]) -> String {
    if let Ok(s) = std::str::from_utf8(bytes)
        && !needs_quotes(s)
    {
        return s.to_string();
    }
    let mut out = String::with_capacity(bytes.len() + 2);
    out.push('"');
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
                c if c.is_control() || is_invisible(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\{b:03o}"));
        }
    }
    out.push('"');
    out
}

fn needs_quotes(s: &str) -> bool {
    s.is_empty()
        || s.starts_with(' ')
        || s.ends_with(' ')
        || s.starts_with('"')
        // The separators of our own line formats.
        || s.contains(" | ")
        || s.contains("  ")
        || s.chars().any(|c| c.is_control() || c == '\\' || is_invisible(c))
}

/// Characters that change how the rest of the line reads without being
/// seen: bidirectional overrides and zero-width characters.
fn is_invisible(c: char) -> bool {
    matches!(c as u32, 0x200b..=0x200f | 0x202a..=0x202e | 0x2066..=0x2069 | 0xfeff)
}

/// Unix milliseconds as an RFC 3339 time in UTC, to the second
/// (`2026-12-02T12:59:17Z`): how times are printed and sent.
pub fn rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    use super::{quote, quote_name, rfc3339};

    #[test]
    fn plain_names_are_printed_as_they_are() {
        for s in ["src/app.py", "my file.txt", "été", "m1", "prompt 7: fix the bug"] {
            assert_eq!(quote(s), s);
        }
    }

    #[test]
    fn names_that_could_fake_lines_or_drive_the_terminal_are_quoted() {
        assert_eq!(quote("a\nb"), "\"a\\nb\"");
        assert_eq!(quote("\u{1b}[31mred"), "\"\\x1b[31mred\"");
        assert_eq!(quote("x | +1 -1 (modified)"), "\"x | +1 -1 (modified)\"");
        assert_eq!(quote("back\\slash"), "\"back\\\\slash\"");
        assert_eq!(quote("say \"hi\"\r"), "\"say \\\"hi\\\"\\r\"");
        assert_eq!(quote("\u{202e}txt.exe"), "\"\\u{202e}txt.exe\"");
        assert_eq!(quote(""), "\"\"");
        for s in ["a\nb", "\u{1b}[2J", "x | y", "\u{9b}31m"] {
            assert!(!quote(s).chars().any(|c| c.is_control()), "{s:?} printed with a control character");
        }
    }

    #[test]
    fn bytes_that_are_not_utf8_are_octal_escapes() {
        assert_eq!(quote_name(OsStr::from_bytes(b"bad\xff\xfe.txt")), "\"bad\\377\\376.txt\"");
        assert_eq!(quote_name(OsStr::from_bytes(b"d\xe9j\xe0 vu/\xc3\xa9")), "\"d\\351j\\340 vu/\u{e9}\"");
        assert_eq!(quote_name(OsStr::new("src/app.py")), "src/app.py");
    }

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_216_357_970), "2026-12-02T12:59:17Z");
    }
}
