//! Parameter kinds and values: parsing text into typed values, validating
//! them, and printing them back in canonical form.

use core::fmt::{self, Write};
use core::num::IntErrorKind;

use super::excerpt::Excerpt;

/// The longest string or list value, in bytes.
pub const MAX_VALUE_LEN: usize = 128;

/// The most names a flags table may have (one bit of a `u32` each).
pub const MAX_FLAGS: usize = 32;

/// Storage for string and list values (a `u8` length suffices).
pub type ValueString = heapless::String<MAX_VALUE_LEN, u8>;

/// The type of a parameter, with the bounds its values must respect.
///
/// Every parser takes untrusted text (a config file line, an environment
/// variable) and returns a [`ValueError`] instead of panicking. Leading and
/// trailing whitespace is ignored for every kind except strings, which are
/// kept verbatim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// A signed decimal integer within `min..=max`.
    Int {
        /// The smallest accepted value.
        min: i64,
        /// The largest accepted value.
        max: i64,
    },
    /// A byte count within `min..=max`, written with an optional binary
    /// suffix `k`, `M` or `G` (any case): `64k` is 65536.
    Size {
        /// The smallest accepted value.
        min: u64,
        /// The largest accepted value.
        max: u64,
    },
    /// `true`/`false`, `1`/`0`, `yes`/`no` or `on`/`off`, in any case.
    Bool,
    /// Any text up to [`MAX_VALUE_LEN`] bytes, kept verbatim.
    Str,
    /// Comma-separated items, optionally negated as a whole by a leading `^`
    /// (`tcp,self`, `^tcp`, `eth0,10.0.0.0/8`); see [`ListValue`].
    List,
    /// Comma-separated names from a table, stored as a bitmask: name `i` of
    /// the table is bit `1 << i` (`send,put` with table
    /// `[send, put, get, inplace]` is `0b11`).
    Flags {
        /// The flag names, at most [`MAX_FLAGS`] of them.
        names: &'static [&'static str],
    },
}

impl ParamKind {
    /// An integer with no bounds beyond those of `i64`.
    pub const INT: ParamKind = ParamKind::Int {
        min: i64::MIN,
        max: i64::MAX,
    };

    /// A size with no bounds beyond those of `u64`.
    pub const SIZE: ParamKind = ParamKind::Size {
        min: 0,
        max: u64::MAX,
    };

    /// The short name of the kind, as `btl info` shows it.
    pub const fn name(&self) -> &'static str {
        match self {
            ParamKind::Int { .. } => "int",
            ParamKind::Size { .. } => "size",
            ParamKind::Bool => "bool",
            ParamKind::Str => "string",
            ParamKind::List => "list",
            ParamKind::Flags { .. } => "flags",
        }
    }

    /// Checks that the kind itself makes sense (bounds in order, a usable
    /// flag table); returns what is wrong otherwise.
    pub fn validate(&self) -> Result<(), &'static str> {
        match *self {
            ParamKind::Int { min, max } if min > max => Err("minimum above maximum"),
            ParamKind::Size { min, max } if min > max => Err("minimum above maximum"),
            ParamKind::Flags { names } => {
                if names.is_empty() {
                    return Err("empty flag table");
                }
                if names.len() > MAX_FLAGS {
                    return Err("more than 32 flag names");
                }
                for (i, name) in names.iter().enumerate() {
                    if name.is_empty() || name.contains(|c: char| c == ',' || c.is_whitespace()) {
                        return Err("flag names must be non-empty, without commas or whitespace");
                    }
                    if names[..i].iter().any(|n| n.eq_ignore_ascii_case(name)) {
                        return Err("duplicate flag name");
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Parses `text` into a value of this kind, within its bounds.
    pub fn parse(&self, text: &str) -> Result<ParamValue, ValueError> {
        match *self {
            ParamKind::Int { min, max } => {
                let v = parse_int(text)?;
                check_range(v, min, max, Limit::Int)?;
                Ok(ParamValue::Int(v))
            }
            ParamKind::Size { min, max } => {
                let v = parse_size(text)?;
                check_range(v, min, max, Limit::Size)?;
                Ok(ParamValue::Size(v))
            }
            ParamKind::Bool => parse_bool(text).map(ParamValue::Bool),
            ParamKind::Str => {
                let mut s = ValueString::new();
                s.push_str(text)
                    .map_err(|_| ValueError::TooLong { max: MAX_VALUE_LEN })?;
                Ok(ParamValue::Str(s))
            }
            ParamKind::List => ListValue::parse(text).map(ParamValue::List),
            ParamKind::Flags { names } => {
                parse_flags(text, names).map(|bits| ParamValue::Flags { bits, names })
            }
        }
    }

    /// Checks a typed value against this kind and its bounds, returning it
    /// ready to store (a flags value takes this kind's name table).
    pub fn check(&self, value: ParamValue) -> Result<ParamValue, ValueError> {
        match (*self, value) {
            (ParamKind::Int { min, max }, ParamValue::Int(v)) => {
                check_range(v, min, max, Limit::Int).map(|()| ParamValue::Int(v))
            }
            (ParamKind::Size { min, max }, ParamValue::Size(v)) => {
                check_range(v, min, max, Limit::Size).map(|()| ParamValue::Size(v))
            }
            (ParamKind::Flags { names }, ParamValue::Flags { bits, .. }) => {
                let known = match names.len().min(MAX_FLAGS) {
                    0 => 0,
                    n => u32::MAX >> (MAX_FLAGS - n),
                };
                if bits & !known != 0 {
                    return Err(ValueError::UnknownFlagBits {
                        bits: bits & !known,
                    });
                }
                Ok(ParamValue::Flags { bits, names })
            }
            (ParamKind::Bool, v @ ParamValue::Bool(_))
            | (ParamKind::Str, v @ ParamValue::Str(_))
            | (ParamKind::List, v @ ParamValue::List(_)) => Ok(v),
            (kind, v) => Err(ValueError::WrongKind {
                expected: kind.name(),
                found: v.kind_name(),
            }),
        }
    }
}

impl fmt::Display for ParamKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A typed parameter value. `Display` prints it in canonical form, which
/// parses back to the same value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamValue {
    /// An integer.
    Int(i64),
    /// A byte count; printed with the largest exact binary suffix.
    Size(u64),
    /// A boolean; printed `true` or `false`.
    Bool(bool),
    /// A string, verbatim.
    Str(ValueString),
    /// A validated list.
    List(ListValue),
    /// A flags bitmask with the table that names its bits.
    Flags {
        /// Bit `i` set means `names[i]` is on.
        bits: u32,
        /// The flag table; replaced by the parameter's own when stored.
        names: &'static [&'static str],
    },
}

impl ParamValue {
    /// The short name of the value's kind (as [`ParamKind::name`]).
    pub const fn kind_name(&self) -> &'static str {
        match self {
            ParamValue::Int(_) => "int",
            ParamValue::Size(_) => "size",
            ParamValue::Bool(_) => "bool",
            ParamValue::Str(_) => "string",
            ParamValue::List(_) => "list",
            ParamValue::Flags { .. } => "flags",
        }
    }
}

impl fmt::Display for ParamValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamValue::Int(v) => write!(f, "{v}"),
            ParamValue::Size(v) => write!(f, "{}", DisplaySize(*v)),
            ParamValue::Bool(v) => write!(f, "{v}"),
            ParamValue::Str(s) => f.write_str(s),
            ParamValue::List(l) => f.write_str(l.as_str()),
            ParamValue::Flags { bits, names } => {
                let mut first = true;
                for (i, name) in names.iter().take(MAX_FLAGS).enumerate() {
                    if bits & (1u32 << i) != 0 {
                        if !first {
                            f.write_char(',')?;
                        }
                        f.write_str(name)?;
                        first = false;
                    }
                }
                Ok(())
            }
        }
    }
}

/// A validated list value, kept in canonical text form (`^a,b,c`: items
/// trimmed, one `,` between them, `^` first when negated).
///
/// Rules: empty text is the empty list; a `^` may only come first and then
/// negates the whole list (`tcp,^self` mixes included and excluded names and
/// is rejected); items are non-empty and contain no whitespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListValue {
    text: ValueString,
}

impl ListValue {
    /// The empty list.
    pub const fn new() -> Self {
        Self {
            text: ValueString::new(),
        }
    }

    /// Parses and validates a list.
    pub fn parse(text: &str) -> Result<Self, ValueError> {
        let mut out = ValueString::new();
        let text = text.trim();
        if text.is_empty() {
            return Ok(Self { text: out });
        }
        let rest = match text.strip_prefix('^') {
            Some(rest) => {
                let rest = rest.trim_start();
                if rest.is_empty() {
                    return Err(ValueError::EmptyNegation);
                }
                push(&mut out, "^")?;
                rest
            }
            None => text,
        };
        for (i, item) in rest.split(',').enumerate() {
            let item = item.trim();
            if item.is_empty() {
                return Err(ValueError::EmptyItem);
            }
            if item.contains('^') {
                return Err(ValueError::MisplacedNegation);
            }
            if item.contains(char::is_whitespace) {
                return Err(ValueError::SpaceInItem);
            }
            if i > 0 {
                push(&mut out, ",")?;
            }
            push(&mut out, item)?;
        }
        Ok(Self { text: out })
    }

    /// Whether the list was written with a leading `^` (exclude these).
    pub fn is_negated(&self) -> bool {
        self.text.starts_with('^')
    }

    /// The items, without the `^`.
    pub fn items(&self) -> ListItems<'_> {
        let body = self.text.strip_prefix('^').unwrap_or(&self.text);
        ListItems {
            inner: (!body.is_empty()).then(|| body.split(',')),
        }
    }

    /// How many items the list has.
    pub fn len(&self) -> usize {
        self.items().count()
    }

    /// Whether the list has no items (for the selection list: use all).
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// Whether `item` is one of the items (exact comparison).
    pub fn contains(&self, item: &str) -> bool {
        self.items().any(|i| i == item)
    }

    /// The canonical text.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for ListValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl<'a> IntoIterator for &'a ListValue {
    type Item = &'a str;
    type IntoIter = ListItems<'a>;

    fn into_iter(self) -> ListItems<'a> {
        self.items()
    }
}

/// The items of a [`ListValue`], in order.
#[derive(Clone, Debug)]
pub struct ListItems<'a> {
    inner: Option<core::str::Split<'a, char>>,
}

impl<'a> Iterator for ListItems<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        self.inner.as_mut()?.next()
    }
}

fn push(out: &mut ValueString, s: &str) -> Result<(), ValueError> {
    out.push_str(s)
        .map_err(|_| ValueError::TooLong { max: MAX_VALUE_LEN })
}

fn check_range<T: PartialOrd>(
    v: T,
    min: T,
    max: T,
    limit: fn(T) -> Limit,
) -> Result<(), ValueError> {
    if v < min {
        Err(ValueError::BelowMinimum(limit(min)))
    } else if v > max {
        Err(ValueError::AboveMaximum(limit(max)))
    } else {
        Ok(())
    }
}

/// Parses a signed decimal integer (surrounding whitespace ignored).
pub fn parse_int(text: &str) -> Result<i64, ValueError> {
    text.trim().parse::<i64>().map_err(|e| match e.kind() {
        IntErrorKind::PosOverflow | IntErrorKind::NegOverflow => ValueError::TooLarge,
        _ => ValueError::NotAnInteger,
    })
}

/// Parses a size: decimal digits and an optional binary suffix `k`, `M` or
/// `G` in any case (`64k` = 65536, `1g` = 1073741824); surrounding
/// whitespace ignored.
pub fn parse_size(text: &str) -> Result<u64, ValueError> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(split);
    if digits.is_empty() {
        return Err(ValueError::NotASize);
    }
    let shift = match suffix {
        "" => 0,
        "k" | "K" => 10,
        "m" | "M" => 20,
        "g" | "G" => 30,
        _ => return Err(ValueError::NotASize),
    };
    let n: u64 = digits.parse().map_err(|e: core::num::ParseIntError| {
        if *e.kind() == IntErrorKind::PosOverflow {
            ValueError::TooLarge
        } else {
            ValueError::NotASize
        }
    })?;
    n.checked_mul(1u64 << shift).ok_or(ValueError::TooLarge)
}

/// Parses a boolean: `true`/`false`, `1`/`0`, `yes`/`no`, `on`/`off`, in
/// any case, surrounding whitespace ignored.
pub fn parse_bool(text: &str) -> Result<bool, ValueError> {
    let text = text.trim();
    let is = |words: [&str; 4]| words.iter().any(|w| text.eq_ignore_ascii_case(w));
    if is(["true", "1", "yes", "on"]) {
        Ok(true)
    } else if is(["false", "0", "no", "off"]) {
        Ok(false)
    } else {
        Err(ValueError::NotABool)
    }
}

/// Parses comma-separated flag names (any case) from `names` into a
/// bitmask; empty text is no flags.
pub fn parse_flags(text: &str, names: &'static [&'static str]) -> Result<u32, ValueError> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(0);
    }
    let mut bits = 0u32;
    for item in text.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(ValueError::EmptyItem);
        }
        let index = names
            .iter()
            .take(MAX_FLAGS)
            .position(|n| n.eq_ignore_ascii_case(item))
            .ok_or_else(|| ValueError::UnknownFlag {
                flag: Excerpt::new(item),
                expected: names,
            })?;
        bits |= 1u32 << index;
    }
    Ok(bits)
}

/// Prints a size canonically: with the largest binary suffix that divides
/// it exactly (`65536` → `64k`, `1048576` → `1M`), else in plain digits
/// (`1000`, `0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DisplaySize(pub u64);

impl fmt::Display for DisplaySize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        if n != 0 {
            for (shift, suffix) in [(30, 'G'), (20, 'M'), (10, 'k')] {
                if n.trailing_zeros() >= shift {
                    return write!(f, "{}{suffix}", n >> shift);
                }
            }
        }
        write!(f, "{n}")
    }
}

/// A bound quoted in an error, printed in the parameter's own notation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// An integer bound.
    Int(i64),
    /// A size bound, printed with a suffix (`4G`).
    Size(u64),
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Int(v) => write!(f, "{v}"),
            Limit::Size(v) => write!(f, "{}", DisplaySize(*v)),
        }
    }
}

/// What is wrong with a value. `Display` says it in a phrase that completes
/// "invalid value `x` for parameter p: ...".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValueError {
    /// Not a decimal integer.
    NotAnInteger,
    /// Not digits with an optional `k`/`M`/`G` suffix.
    NotASize,
    /// Not one of the boolean words.
    NotABool,
    /// A number that does not fit in 64 bits.
    TooLarge,
    /// Below the parameter's minimum.
    BelowMinimum(Limit),
    /// Above the parameter's maximum.
    AboveMaximum(Limit),
    /// Longer than the fixed capacity of string values.
    TooLong {
        /// The capacity in bytes.
        max: usize,
    },
    /// An empty item in a list (`tcp,,self`, `tcp,`).
    EmptyItem,
    /// Whitespace inside a list item (`tcp self`).
    SpaceInItem,
    /// A `^` other than at the start of a list.
    MisplacedNegation,
    /// A `^` with nothing after it.
    EmptyNegation,
    /// A flag name not in the table.
    UnknownFlag {
        /// The name as written.
        flag: Excerpt,
        /// The names that are accepted.
        expected: &'static [&'static str],
    },
    /// Flag bits, set from code, that the table does not name.
    UnknownFlagBits {
        /// The unnamed bits.
        bits: u32,
    },
    /// A typed value of another kind than the parameter's, set from code.
    WrongKind {
        /// The parameter's kind.
        expected: &'static str,
        /// The kind of the value given.
        found: &'static str,
    },
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueError::NotAnInteger => f.write_str("not an integer"),
            ValueError::NotASize => {
                f.write_str("not a size (expected digits with an optional k, M or G suffix)")
            }
            ValueError::NotABool => {
                f.write_str("not a boolean (expected true/false, 1/0, yes/no or on/off)")
            }
            ValueError::TooLarge => f.write_str("too large (does not fit in 64 bits)"),
            ValueError::BelowMinimum(min) => write!(f, "below minimum {min}"),
            ValueError::AboveMaximum(max) => write!(f, "above maximum {max}"),
            ValueError::TooLong { max } => write!(f, "longer than {max} bytes"),
            ValueError::EmptyItem => f.write_str("empty list item"),
            ValueError::SpaceInItem => f.write_str("whitespace inside a list item"),
            ValueError::MisplacedNegation => f.write_str(
                "`^` may only prefix the whole list (cannot mix included and excluded names)",
            ),
            ValueError::EmptyNegation => f.write_str("`^` must be followed by at least one item"),
            ValueError::UnknownFlag { flag, expected } => {
                write!(f, "unknown flag `{flag}`, expected one of ")?;
                for (i, name) in expected.iter().enumerate() {
                    if i > 0 {
                        f.write_char(',')?;
                    }
                    f.write_str(name)?;
                }
                Ok(())
            }
            ValueError::UnknownFlagBits { bits } => {
                write!(f, "flag bits {bits:#x} have no name")
            }
            ValueError::WrongKind { expected, found } => {
                write!(f, "expected a value of kind {expected}, got {found}")
            }
        }
    }
}

impl core::error::Error for ValueError {}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use proptest::prelude::*;
    use std::string::{String, ToString};

    const FLAGS: &[&str] = &["send", "put", "get", "inplace"];
    const FLAGS_KIND: ParamKind = ParamKind::Flags { names: FLAGS };

    fn all_kinds() -> [ParamKind; 8] {
        [
            ParamKind::INT,
            ParamKind::Int { min: -5, max: 5 },
            ParamKind::SIZE,
            ParamKind::Size {
                min: 1,
                max: 4 << 30,
            },
            ParamKind::Bool,
            ParamKind::Str,
            ParamKind::List,
            FLAGS_KIND,
        ]
    }

    #[test]
    fn int_parsing() {
        assert_eq!(parse_int("42"), Ok(42));
        assert_eq!(parse_int("  -7\t"), Ok(-7));
        assert_eq!(parse_int("+3"), Ok(3));
        assert_eq!(parse_int(&i64::MIN.to_string()), Ok(i64::MIN));
        assert_eq!(parse_int(""), Err(ValueError::NotAnInteger));
        assert_eq!(parse_int("   "), Err(ValueError::NotAnInteger));
        assert_eq!(parse_int("4 2"), Err(ValueError::NotAnInteger));
        assert_eq!(parse_int("0x10"), Err(ValueError::NotAnInteger));
        assert_eq!(parse_int("64k"), Err(ValueError::NotAnInteger));
        assert_eq!(parse_int("-"), Err(ValueError::NotAnInteger));
        assert_eq!(parse_int("9223372036854775808"), Err(ValueError::TooLarge));
        assert_eq!(parse_int("-9223372036854775809"), Err(ValueError::TooLarge));
    }

    #[test]
    fn int_bounds() {
        let k = ParamKind::Int { min: 1, max: 8 };
        assert_eq!(k.parse("1"), Ok(ParamValue::Int(1)));
        assert_eq!(k.parse("8"), Ok(ParamValue::Int(8)));
        assert_eq!(k.parse("0"), Err(ValueError::BelowMinimum(Limit::Int(1))));
        assert_eq!(k.parse("9"), Err(ValueError::AboveMaximum(Limit::Int(8))));
    }

    #[test]
    fn size_parsing() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_size("64k"), Ok(65536));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("4g"), Ok(4 << 30));
        assert_eq!(parse_size(" 4G \n"), Ok(4 << 30));
        assert_eq!(parse_size("007k"), Ok(7 << 10));
        for bad in [
            "", " ", "k", "-1", "+1", "1.5k", "64 k", "64kb", "64kk", "1T", "x64",
        ] {
            assert_eq!(parse_size(bad), Err(ValueError::NotASize), "{bad:?}");
        }
    }

    #[test]
    fn size_overflow() {
        assert_eq!(parse_size("99999999999G"), Err(ValueError::TooLarge));
        assert_eq!(
            parse_size("18446744073709551616"),
            Err(ValueError::TooLarge)
        );
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(parse_size("17179869183G"), Ok(17_179_869_183 << 30));
        assert_eq!(parse_size("17179869184G"), Err(ValueError::TooLarge));
    }

    #[test]
    fn size_prints_canonically() {
        let cases = [
            (0, "0"),
            (1000, "1000"),
            (1024, "1k"),
            (1536, "1536"),
            (65536, "64k"),
            (1 << 20, "1M"),
            (3 << 20, "3M"),
            (1 << 30, "1G"),
            (4 << 30, "4G"),
            (1 << 40, "1024G"),
            (u64::MAX, "18446744073709551615"),
        ];
        for (n, text) in cases {
            assert_eq!(DisplaySize(n).to_string(), text);
            assert_eq!(ParamValue::Size(n).to_string(), text);
        }
    }

    #[test]
    fn size_bounds_print_with_suffix() {
        let k = ParamKind::Size {
            min: 1024,
            max: 4 << 30,
        };
        let err = k.parse("5G").expect_err("above max");
        assert_eq!(err.to_string(), "above maximum 4G");
        let err = k.parse("1").expect_err("below min");
        assert_eq!(err.to_string(), "below minimum 1k");
    }

    #[test]
    fn bool_parsing() {
        for t in ["true", "TRUE", "1", "yes", "Yes", "on", " ON "] {
            assert_eq!(parse_bool(t), Ok(true), "{t:?}");
        }
        for t in ["false", "False", "0", "no", "NO", "off", "\toff"] {
            assert_eq!(parse_bool(t), Ok(false), "{t:?}");
        }
        for t in ["", "2", "y", "n", "tru", "truex", "o"] {
            assert_eq!(parse_bool(t), Err(ValueError::NotABool), "{t:?}");
        }
        assert_eq!(ParamValue::Bool(true).to_string(), "true");
        assert_eq!(ParamValue::Bool(false).to_string(), "false");
    }

    #[test]
    fn strings_are_verbatim_and_bounded() {
        let v = ParamKind::Str.parse("  a b  ").expect("fits");
        assert_eq!(v.to_string(), "  a b  ");
        assert_eq!(ParamKind::Str.parse("").expect("empty ok").to_string(), "");
        let long = "x".repeat(MAX_VALUE_LEN);
        assert!(ParamKind::Str.parse(&long).is_ok());
        let too_long = "x".repeat(MAX_VALUE_LEN + 1);
        assert_eq!(
            ParamKind::Str.parse(&too_long),
            Err(ValueError::TooLong { max: MAX_VALUE_LEN })
        );
    }

    #[test]
    fn list_parsing() {
        let l = ListValue::parse("tcp,self").expect("valid");
        assert!(!l.is_negated());
        assert_eq!(l.items().collect::<std::vec::Vec<_>>(), ["tcp", "self"]);
        assert_eq!(l.len(), 2);
        assert!(l.contains("self") && !l.contains("sel"));

        let l = ListValue::parse(" ^ tcp , udp ").expect("valid");
        assert!(l.is_negated());
        assert_eq!(l.as_str(), "^tcp,udp");
        assert_eq!(
            (&l).into_iter().collect::<std::vec::Vec<_>>(),
            ["tcp", "udp"]
        );

        let l = ListValue::parse("eth0,10.0.0.0/8").expect("valid");
        assert_eq!(l.to_string(), "eth0,10.0.0.0/8");

        let l = ListValue::parse("  ").expect("empty is valid");
        assert!(l.is_empty() && !l.is_negated());
        assert_eq!(l.len(), 0);
        assert_eq!(l.items().count(), 0);
    }

    #[test]
    fn list_errors() {
        let err = |t: &str| ListValue::parse(t).expect_err(t);
        assert_eq!(err("tcp,,self"), ValueError::EmptyItem);
        assert_eq!(err("tcp,"), ValueError::EmptyItem);
        assert_eq!(err(",tcp"), ValueError::EmptyItem);
        assert_eq!(err("tcp,^self"), ValueError::MisplacedNegation);
        assert_eq!(err("^tcp,^self"), ValueError::MisplacedNegation);
        assert_eq!(err("^^tcp"), ValueError::MisplacedNegation);
        assert_eq!(err("^"), ValueError::EmptyNegation);
        assert_eq!(err(" ^  "), ValueError::EmptyNegation);
        assert_eq!(err("tcp self"), ValueError::SpaceInItem);
        let long = "a,".repeat(MAX_VALUE_LEN / 2) + "a";
        assert_eq!(err(&long), ValueError::TooLong { max: MAX_VALUE_LEN });
    }

    #[test]
    fn flags_parsing() {
        assert_eq!(parse_flags("send,put,get,inplace", FLAGS), Ok(0b1111));
        assert_eq!(parse_flags(" PUT , send ", FLAGS), Ok(0b11));
        assert_eq!(parse_flags("get,get", FLAGS), Ok(0b100));
        assert_eq!(parse_flags("", FLAGS), Ok(0));
        assert_eq!(parse_flags("send,,put", FLAGS), Err(ValueError::EmptyItem));
        let err = parse_flags("send,foo", FLAGS).expect_err("unknown");
        assert_eq!(
            err.to_string(),
            "unknown flag `foo`, expected one of send,put,get,inplace"
        );
    }

    #[test]
    fn flags_print_in_table_order() {
        let v = FLAGS_KIND.parse("inplace,send").expect("valid");
        assert_eq!(v.to_string(), "send,inplace");
        assert_eq!(FLAGS_KIND.parse("").expect("valid").to_string(), "");
    }

    #[test]
    fn kind_validation() {
        assert!(ParamKind::Int { min: 2, max: 1 }.validate().is_err());
        assert!(ParamKind::Size { min: 2, max: 1 }.validate().is_err());
        assert!(ParamKind::Flags { names: &[] }.validate().is_err());
        assert!(ParamKind::Flags { names: &["a", "A"] }.validate().is_err());
        assert!(ParamKind::Flags { names: &["a,b"] }.validate().is_err());
        assert!(ParamKind::Flags { names: &[""] }.validate().is_err());
        const MANY: [&str; 33] = ["x"; 33];
        assert!(ParamKind::Flags { names: &MANY }.validate().is_err());
        for k in all_kinds() {
            assert!(k.validate().is_ok(), "{k}");
        }
    }

    #[test]
    fn check_typed_values() {
        let k = ParamKind::Int { min: 0, max: 3 };
        assert_eq!(k.check(ParamValue::Int(3)), Ok(ParamValue::Int(3)));
        assert_eq!(
            k.check(ParamValue::Int(4)),
            Err(ValueError::AboveMaximum(Limit::Int(3)))
        );
        assert_eq!(
            k.check(ParamValue::Bool(true)),
            Err(ValueError::WrongKind {
                expected: "int",
                found: "bool"
            })
        );
        let v = FLAGS_KIND
            .check(ParamValue::Flags {
                bits: 0b101,
                names: &[],
            })
            .expect("known bits");
        assert_eq!(v.to_string(), "send,get");
        assert_eq!(
            FLAGS_KIND.check(ParamValue::Flags {
                bits: 0b10001,
                names: &[]
            }),
            Err(ValueError::UnknownFlagBits { bits: 0b10000 })
        );
        const ALL: [&str; 32] = [
            "a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "b0", "b1", "b2", "b3",
            "b4", "b5", "b6", "b7", "b8", "b9", "c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7",
            "c8", "c9", "d0", "d1",
        ];
        let wide = ParamKind::Flags { names: &ALL };
        assert!(wide.validate().is_ok());
        assert!(
            wide.check(ParamValue::Flags {
                bits: u32::MAX,
                names: &[]
            })
            .is_ok()
        );
        assert_eq!(
            wide.parse("d1"),
            Ok(ParamValue::Flags {
                bits: 1 << 31,
                names: &ALL
            })
        );
    }

    #[test]
    fn error_texts() {
        let cases: [(ValueError, &str); 9] = [
            (ValueError::NotAnInteger, "not an integer"),
            (
                ValueError::NotASize,
                "not a size (expected digits with an optional k, M or G suffix)",
            ),
            (
                ValueError::NotABool,
                "not a boolean (expected true/false, 1/0, yes/no or on/off)",
            ),
            (ValueError::TooLarge, "too large (does not fit in 64 bits)"),
            (
                ValueError::AboveMaximum(Limit::Size(4 << 30)),
                "above maximum 4G",
            ),
            (ValueError::BelowMinimum(Limit::Int(-3)), "below minimum -3"),
            (ValueError::TooLong { max: 128 }, "longer than 128 bytes"),
            (ValueError::EmptyItem, "empty list item"),
            (
                ValueError::MisplacedNegation,
                "`^` may only prefix the whole list (cannot mix included and excluded names)",
            ),
        ];
        for (err, text) in cases {
            assert_eq!(err.to_string(), text);
        }
    }

    #[test]
    fn canonical_text_parses_back_for_every_kind() {
        let samples = [
            "7", "-2", "64k", "1M", "yes", "a b", "^tcp,udp", "put,send", "",
        ];
        for kind in all_kinds() {
            for s in samples {
                if let Ok(v) = kind.parse(s) {
                    let printed = v.to_string();
                    assert_eq!(kind.parse(&printed), Ok(v), "{kind} {s:?} -> {printed:?}");
                }
            }
        }
    }

    proptest! {
        #[test]
        fn size_print_parse_round_trip(n in any::<u64>()) {
            let text = DisplaySize(n).to_string();
            prop_assert_eq!(parse_size(&text), Ok(n));
        }

        #[test]
        fn size_round_trip_of_suffixed_values(q in 0u64..(1 << 34), shift in prop::sample::select(&[0u32, 10, 20, 30][..])) {
            let n = q << shift;
            prop_assert_eq!(parse_size(&DisplaySize(n).to_string()), Ok(n));
        }

        #[test]
        fn parsers_never_panic(s in any::<String>()) {
            for kind in all_kinds() {
                if let Ok(v) = kind.parse(&s) {
                    // What parses prints back to something that parses to it.
                    prop_assert_eq!(kind.parse(&v.to_string()), Ok(v));
                }
            }
        }

        #[test]
        fn parsers_never_panic_on_value_like_text(s in "[ ,^0-9a-zA-Z\\-+kKmMgG]{0,40}") {
            for kind in all_kinds() {
                if let Ok(v) = kind.parse(&s) {
                    prop_assert_eq!(kind.parse(&v.to_string()), Ok(v));
                }
            }
        }

        #[test]
        fn int_print_parse_round_trip(n in any::<i64>()) {
            prop_assert_eq!(ParamKind::INT.parse(&ParamValue::Int(n).to_string()), Ok(ParamValue::Int(n)));
        }
    }
}
