//! Errors: what was wrong with an address text and at which byte, and why an
//! lnet address has no TCP port.

use core::fmt;

use super::{Family, MAX_LEN, PID, PORTAL_MAX, PORTAL_MIN, TMID_MAX};

/// How many bytes of the offending text a [`ParseError`] keeps for its
/// message; longer text is cut at a character boundary and shown with `…`.
const TOKEN_CAP: usize = 40;

/// What was wrong with an address text; [`ParseError`] adds where.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The text is empty.
    Empty,
    /// The text is longer than [`MAX_LEN`] bytes, checked before anything
    /// else so that parsing work stays bounded.
    TooLong {
        /// Length of the rejected text in bytes.
        len: usize,
    },
    /// A separator (`:` or `@`) that the grammar needs is not there.
    MissingSeparator(char),
    /// The native form starts with something other than `inet` or `inet6`.
    UnknownFamily,
    /// The native socket type is not `stream`, `dgram`, `tcp` or `udp`.
    UnknownType,
    /// The native host is not a numeric IPv4 or IPv6 address.
    BadHost,
    /// The native host is a valid address of the other IP version than the
    /// family asks for (`inet` with an IPv6 host, `inet6` with an IPv4 one).
    FamilyMismatch(Family),
    /// The port is not a decimal number.
    BadPort,
    /// The port is a number above 65535.
    PortOutOfRange,
    /// The lnet nid is neither a numeric IPv4 address nor `0`.
    BadNid,
    /// The lnet network is not `tcp[N]`, `o2ib[N]` or `lo`.
    UnknownNetwork,
    /// Nid `0` with a network other than `lo`, or `lo` with an IP nid.
    NidNetworkMismatch,
    /// The lnet pid is not 12345, the only one Motr accepts.
    BadPid,
    /// The lnet portal is not a decimal number.
    BadPortal,
    /// The lnet portal is outside the range the port mapping can encode.
    PortalOutOfRange,
    /// The lnet tmid is neither `*` nor a decimal number.
    BadTmid,
    /// The lnet tmid is outside the range the port mapping can encode.
    TmidOutOfRange,
    /// Text follows a complete address.
    TrailingInput,
}

impl ErrorKind {
    /// The name of the field this kind of error is about, used to say "the
    /// port is empty" rather than "port `` is not a number".
    fn field(self) -> Option<&'static str> {
        match self {
            Self::UnknownFamily => Some("family"),
            Self::UnknownType => Some("socket type"),
            Self::BadHost | Self::FamilyMismatch(_) => Some("host"),
            Self::BadPort => Some("port"),
            Self::BadNid => Some("nid"),
            Self::UnknownNetwork => Some("network"),
            Self::BadPid => Some("pid"),
            Self::BadPortal => Some("portal"),
            Self::BadTmid => Some("tmid"),
            _ => None,
        }
    }
}

/// An address text that could not be parsed: the kind of problem, the byte
/// offset in the input where it was found, and (a prefix of) the text at
/// fault, so the message can quote it without allocating.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ParseError {
    kind: ErrorKind,
    offset: usize,
    token: [u8; TOKEN_CAP],
    token_len: u8,
    truncated: bool,
}

impl ParseError {
    /// Builds an error of `kind` at `offset`, quoting `token` (cut to
    /// [`TOKEN_CAP`] bytes at a character boundary).
    pub(crate) fn new(kind: ErrorKind, offset: usize, token: &str) -> Self {
        let mut len = token.len().min(TOKEN_CAP);
        while !token.is_char_boundary(len) {
            len -= 1;
        }
        let mut buf = [0; TOKEN_CAP];
        buf[..len].copy_from_slice(&token.as_bytes()[..len]);
        Self {
            kind,
            offset,
            token: buf,
            // `len <= TOKEN_CAP`, which fits in a byte.
            token_len: len as u8,
            truncated: len < token.len(),
        }
    }

    /// What was wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Byte offset in the input where the problem was found: the start of the
    /// bad field, or where a missing separator or trailing text begins.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The text at fault (at most 40 bytes of it); empty when there is none,
    /// e.g. for an empty field.
    pub fn token(&self) -> &str {
        // The bytes were copied from a `&str` up to a character boundary.
        core::str::from_utf8(&self.token[..usize::from(self.token_len)]).unwrap_or_default()
    }
}

/// Shows the quoted token, with `…` when it was cut.
struct Quoted<'a>(&'a ParseError);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.token())?;
        if self.0.truncated {
            f.write_str("…")?;
        }
        Ok(())
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ErrorKind as K;

        write!(f, "at byte {}: ", self.offset)?;
        let t = Quoted(self);
        if self.token_len == 0
            && let Some(field) = self.kind.field()
        {
            return write!(f, "the {field} is empty");
        }
        match self.kind {
            K::Empty => f.write_str("the address is empty"),
            K::TooLong { len } => write!(
                f,
                "the address is {len} bytes long, more than the limit of {MAX_LEN}"
            ),
            K::MissingSeparator(c) if self.token_len == 0 => write!(f, "expected `{c}`"),
            K::MissingSeparator(c) => write!(f, "expected `{c}` after `{t}`"),
            K::UnknownFamily => write!(
                f,
                "unknown address family `{t}` (expected `inet` or `inet6`)"
            ),
            K::UnknownType => write!(
                f,
                "unknown socket type `{t}` (expected `stream`, `dgram`, `tcp` or `udp`)"
            ),
            K::BadHost => write!(f, "host `{t}` is not a numeric IPv4 or IPv6 address"),
            K::FamilyMismatch(Family::Inet) => write!(
                f,
                "host `{t}` is not an IPv4 address, which family `inet` needs"
            ),
            K::FamilyMismatch(Family::Inet6) => write!(
                f,
                "host `{t}` is not an IPv6 address, which family `inet6` needs"
            ),
            K::BadPort => write!(f, "port `{t}` is not a decimal number"),
            K::PortOutOfRange => write!(f, "port `{t}` is out of range 0..=65535"),
            K::BadNid => write!(f, "nid `{t}` is neither a numeric IPv4 address nor `0`"),
            K::UnknownNetwork => write!(
                f,
                "unknown network `{t}` (expected `tcp` or `o2ib`, each with an \
                 optional number, or `lo`)"
            ),
            K::NidNetworkMismatch => write!(
                f,
                "`{t}` pairs nid and network wrongly: nid `0` goes with `lo`, \
                 and only with it"
            ),
            K::BadPid => write!(
                f,
                "pid `{t}` is not {PID}, the only process id Motr accepts"
            ),
            K::BadPortal => write!(f, "portal `{t}` is not a decimal number"),
            K::PortalOutOfRange => write!(
                f,
                "portal `{t}` is out of range {PORTAL_MIN}..={PORTAL_MAX}"
            ),
            K::BadTmid => write!(f, "tmid `{t}` is neither `*` nor a decimal number"),
            K::TmidOutOfRange => write!(f, "tmid `{t}` is out of range 0..={TMID_MAX}"),
            K::TrailingInput => write!(f, "unexpected `{t}` after the end of the address"),
        }
    }
}

impl fmt::Debug for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ParseError")
            .field("kind", &self.kind)
            .field("offset", &self.offset)
            .field("token", &self.token())
            .field("truncated", &self.truncated)
            .finish()
    }
}

impl core::error::Error for ParseError {}

/// Why an lnet address has no TCP port: its portal or tmid does not fit
/// Motr's port mapping, or its tmid is still the wildcard `*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LnetPortError {
    /// The portal is outside 30..=61.
    PortalOutOfRange(u32),
    /// The tmid is above 1023.
    TmidOutOfRange(u32),
    /// The tmid is `*`: a free one must be picked before there is a port.
    WildcardTmid,
}

impl fmt::Display for LnetPortError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::PortalOutOfRange(p) => {
                write!(f, "portal {p} is out of range {PORTAL_MIN}..={PORTAL_MAX}")
            }
            Self::TmidOutOfRange(t) => write!(f, "tmid {t} is out of range 0..={TMID_MAX}"),
            Self::WildcardTmid => {
                f.write_str("tmid `*` must be replaced by a free tmid before it has a port")
            }
        }
    }
}

impl core::error::Error for LnetPortError {}
