//! Runs `tshark` with the repository's btl dissector (`wireshark/btl.lua`)
//! and reads what it says, for the tests that check captures: the
//! dissector's fields, and each packet's fields from tshark's PDML output.
//!
//! tshark must be installed (Debian's `tshark` package, which
//! `scripts/test` installs): without it these tests fail rather than skip,
//! so that a machine without it cannot pass them unchecked.

#![allow(dead_code)] // each test file uses a part

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Longest a tshark run may take: it takes well under a second on a small
/// capture, so this only bounds a hung one.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// `_ws.expert.severity` of an error (`PI_ERROR`) and of a warning
/// (`PI_WARN`).
const SEVERITY_ERROR: u32 = 0x0080_0000;
const SEVERITY_WARN: u32 = 0x0060_0000;

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate lies in the repository")
        .to_path_buf()
}

/// The dissector under test.
pub fn dissector() -> PathBuf {
    repo().join("wireshark").join("btl.lua")
}

/// What a tshark run printed.
#[derive(Debug)]
pub struct Output {
    /// Its standard output.
    pub stdout: String,
    /// Its standard error (where tshark also warns about running as
    /// root).
    pub stderr: String,
}

/// Runs tshark with the dissector loaded and `args` after, and returns
/// what it printed. Panics if tshark is missing, fails, takes longer than
/// [`TIMEOUT`], or reports a Lua error.
///
/// tshark runs with a home directory of its own, so that a dissector
/// installed in the user's plugin directory (a second `btl` protocol)
/// or the user's preferences cannot change what it says.
pub fn run(args: &[&str]) -> Output {
    let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tshark-home");
    std::fs::create_dir_all(&home).expect("create tshark's home directory");
    let script = format!("lua_script:{}", dissector().display());
    // `-G` must come first; `-X` goes before the rest.
    let (first, rest) = match args.split_first() {
        Some((&"-G", rest)) if !rest.is_empty() => (&args[..2], &args[2..]),
        _ => (&args[..0], args),
    };
    let mut child = Command::new("tshark")
        .args(first)
        .arg("-X")
        .arg(&script)
        .args(rest)
        .env("HOME", &home)
        .env_remove("XDG_CONFIG_HOME")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run tshark ({e}): install Debian's `tshark` package \
                 (scripts/test installs it)"
            )
        });
    let reader = |mut pipe: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = reader(Box::new(child.stdout.take().expect("stdout piped")));
    let stderr = reader(Box::new(child.stderr.take().expect("stderr piped")));
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for tshark") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tshark {args:?} took more than {TIMEOUT:?}");
        }
        thread::sleep(Duration::from_millis(20));
    };
    let output = Output {
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    };
    assert!(
        status.success(),
        "tshark {args:?} failed ({status}): {}",
        output.stderr
    );
    let lua_errors: Vec<&str> = output
        .stderr
        .lines()
        .filter(|line| line.contains("Lua") || line.contains("lua"))
        .collect();
    assert!(
        lua_errors.is_empty(),
        "tshark {args:?}: Lua errors:\n{}",
        output.stderr
    );
    output
}

/// The filter names of the dissector's fields and expert items (those of
/// protocol `btl`), sorted.
pub fn field_names() -> Vec<String> {
    let output = run(&["-G", "fields"]);
    let mut names: Vec<String> = output
        .stdout
        .lines()
        .filter_map(|line| {
            let columns: Vec<&str> = line.split('\t').collect();
            match columns[..] {
                ["F", _, abbrev, _, "btl", ..] => Some(abbrev.to_owned()),
                _ => None,
            }
        })
        .collect();
    names.sort();
    names
}

/// Dissects the capture at `path` and returns its packets.
pub fn dissect(path: &Path) -> Vec<Packet> {
    let path = path.to_str().expect("a capture path in UTF-8");
    parse_pdml(&run(&["-r", path, "-T", "pdml"]).stdout)
}

/// One field of a packet as PDML shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The filter name (`btl.put.xfer_id`; `_ws.expert` for an expert
    /// item).
    pub name: String,
    /// The label and value as the tree shows them.
    pub showname: String,
    /// The value as a filter compares it (`42`, `0x0000abcd`,
    /// `42:54:4c:00`).
    pub show: String,
    /// The bytes of the field, in hex.
    pub value: String,
}

/// One packet of a PDML document: its protocols and fields in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Packet {
    /// Names of the protocols dissected (`frame`, `exported_pdu`, `btl`).
    pub protocols: Vec<String>,
    /// Every field, nested ones included, in the order of the document.
    pub fields: Vec<Field>,
}

impl Packet {
    /// The first field called `name`.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// Every field whose name starts with `prefix`.
    pub fn fields_under<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a Field> {
        self.fields
            .iter()
            .filter(move |f| f.name.starts_with(prefix))
    }

    /// Where a dissector failed: a malformed or short packet (it read
    /// past the end) or a Lua error.
    pub fn failures(&self) -> Vec<String> {
        self.fields
            .iter()
            .filter(|f| {
                matches!(
                    f.name.as_str(),
                    "_ws.malformed" | "_ws.short" | "_ws.lua.error"
                )
            })
            .map(|f| format!("{}: {}", f.name, f.showname))
            .collect()
    }

    /// What is wrong with the packet: its [failures](Self::failures), and
    /// expert items of `severity` or worse.
    pub fn problems(&self, severity: Severity) -> Vec<String> {
        let worst = match severity {
            Severity::Error => SEVERITY_ERROR,
            Severity::Warning => SEVERITY_WARN,
        };
        let mut problems = self.failures();
        let mut expert = None;
        for field in &self.fields {
            match field.name.as_str() {
                "_ws.expert" => expert = Some(field.showname.clone()),
                "_ws.expert.severity" => {
                    let level: u32 = field.show.parse().unwrap_or(u32::MAX);
                    if level >= worst {
                        problems.push(expert.clone().unwrap_or_else(|| field.showname.clone()));
                    }
                }
                _ => {}
            }
        }
        problems
    }
}

/// How bad an expert item must be to count as a problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Errors only (malformed packets, bad checksums).
    Error,
    /// Warnings too (reserved fields not zero, invalid values).
    Warning,
}

/// Reads a PDML document: each `<packet>`'s `<proto>` names and
/// `<field>` attributes, one element a line as tshark writes them.
pub fn parse_pdml(pdml: &str) -> Vec<Packet> {
    let mut packets = Vec::new();
    let mut packet: Option<Packet> = None;
    for line in pdml.lines() {
        let line = line.trim();
        if line.starts_with("<packet") {
            packet = Some(Packet::default());
        } else if line.starts_with("</packet>") {
            packets.extend(packet.take());
        } else if let Some(current) = packet.as_mut() {
            if line.starts_with("<proto ") {
                current.protocols.extend(attribute(line, "name"));
            } else if line.starts_with("<field ") {
                current.fields.push(Field {
                    name: attribute(line, "name").unwrap_or_default(),
                    showname: attribute(line, "showname").unwrap_or_default(),
                    show: attribute(line, "show").unwrap_or_default(),
                    value: attribute(line, "value").unwrap_or_default(),
                });
            }
        }
    }
    packets
}

/// The unescaped value of attribute `name` in the element `line`.
fn attribute(line: &str, name: &str) -> Option<String> {
    let key = format!(" {name}=\"");
    let start = line.find(&key)? + key.len();
    let end = start + line[start..].find('"')?;
    Some(unescape(&line[start..end]))
}

/// XML's predefined entities and numeric character references.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let Some(end) = rest.find(';') else { break };
        let entity = &rest[1..end];
        let decoded = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .map(|hex| u32::from_str_radix(hex, 16))
                .or_else(|| entity.strip_prefix('#').map(str::parse))
                .and_then(Result::ok)
                .and_then(char::from_u32),
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}
