//! Bounded copies of untrusted text, kept inside error values.
//!
//! An error about a bad value or an unknown name must say what the user
//! wrote, yet the core cannot allocate: an [`Excerpt`] keeps the first
//! [`EXCERPT_LEN`] bytes (cut on a character boundary) and remembers that it
//! cut, so that `Display` can show the reader that the text went on.

use core::fmt::{self, Write};

/// How many bytes of user text an error keeps; longer text is truncated.
pub const EXCERPT_LEN: usize = 32;

/// The first [`EXCERPT_LEN`] bytes of some user-supplied text.
///
/// `Display` shows control characters escaped (a value from a file must not
/// move the cursor of the terminal that prints the error) and ends with
/// `...` when the text was truncated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Excerpt {
    text: heapless::String<EXCERPT_LEN, u8>,
    truncated: bool,
}

impl Excerpt {
    /// Copies as much of `text` as fits.
    pub fn new(text: &str) -> Self {
        let mut writer = Truncating::<EXCERPT_LEN>::default();
        // Truncating::write_str never fails.
        let _ = writer.write_str(text);
        writer.into_excerpt()
    }

    /// Prints `value` and keeps as much of the output as fits.
    pub fn of(value: &dyn fmt::Display) -> Self {
        let mut writer = Truncating::<EXCERPT_LEN>::default();
        // Truncating::write_str never fails, so neither does write!; a
        // Display impl that fails on its own just leaves a shorter excerpt.
        let _ = write!(writer, "{value}");
        writer.into_excerpt()
    }

    /// The kept text, without escaping or the truncation mark.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the original text was longer than what is kept.
    pub fn is_truncated(&self) -> bool {
        self.truncated
    }
}

impl fmt::Display for Excerpt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.text.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                f.write_char(c)?;
            }
        }
        if self.truncated {
            f.write_str("...")?;
        }
        Ok(())
    }
}

/// A `fmt::Write` sink of fixed capacity that drops what does not fit
/// instead of failing, so that formatting into it never errors halfway.
/// Lengths fit a `u8`, which keeps the errors that embed it small.
#[derive(Default)]
pub(crate) struct Truncating<const N: usize> {
    pub(crate) text: heapless::String<N, u8>,
    pub(crate) truncated: bool,
}

impl Truncating<EXCERPT_LEN> {
    fn into_excerpt(self) -> Excerpt {
        Excerpt {
            text: self.text,
            truncated: self.truncated,
        }
    }
}

impl<const N: usize> Write for Truncating<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.truncated {
            return Ok(());
        }
        for c in s.chars() {
            if self.text.push(c).is_err() {
                self.truncated = true;
                break;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    #[test]
    fn short_text_is_kept_whole() {
        let e = Excerpt::new("64k");
        assert_eq!(e.as_str(), "64k");
        assert!(!e.is_truncated());
        assert_eq!(e.to_string(), "64k");
    }

    #[test]
    fn long_text_is_cut_on_a_char_boundary() {
        // 31 ASCII bytes then a 2-byte character that does not fit.
        let mut s = std::string::String::new();
        s.push_str(&"a".repeat(31));
        s.push('é');
        s.push_str("tail");
        let e = Excerpt::new(&s);
        assert_eq!(e.as_str(), "a".repeat(31));
        assert!(e.is_truncated());
        assert!(e.to_string().ends_with("..."));
    }

    #[test]
    fn control_characters_are_escaped() {
        let e = Excerpt::new("a\nb\u{1b}[2J");
        assert_eq!(e.to_string(), "a\\nb\\u{1b}[2J");
    }

    #[test]
    fn of_formats_a_value() {
        assert_eq!(Excerpt::of(&12345).as_str(), "12345");
    }
}
