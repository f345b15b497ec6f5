//! The capture writer: frames into a ring of pcapng files of bounded size.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use super::block::{self, EXPORTED_PDU_HEADER, PacketInfo};

/// Where a capture goes and how much of it is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureConfig {
    /// Names the ring's files: `dir/btl.pcapng` gives `dir/btl.0.pcapng`,
    /// `dir/btl.1.pcapng`, … (see [`file_path`](Self::file_path)).
    pub path: PathBuf,
    /// Size after which the next file is started. A file holds at least
    /// one frame, so one larger than this makes a larger file.
    pub file_bytes: u64,
    /// Most files kept: starting one more deletes the oldest. At least 1.
    pub files: u32,
    /// Most bytes kept of each frame: enough for the header and the
    /// largest fixed body with both trailers (116 bytes) shows every field;
    /// a longer frame is cut, and the capture says how long it was.
    pub snaplen: u32,
}

impl CaptureConfig {
    /// A ring at `path` of 4 files of 64 MiB, keeping 256 bytes of each
    /// frame: every field, and the start of the payload.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        CaptureConfig {
            path: path.into(),
            file_bytes: 64 << 20,
            files: 4,
            snaplen: 256,
        }
    }

    /// The ring's file number `index` (counting from 0 for the first file
    /// of a capture): the number goes before the extension of
    /// [`path`](Self::path), or after the name if it has none
    /// (`capture` gives `capture.0`).
    pub fn file_path(&self, index: u64) -> PathBuf {
        let stem = self.path.file_stem().unwrap_or(self.path.as_os_str());
        let mut name = stem.to_os_string();
        name.push(format!(".{index}"));
        if let Some(extension) = self.path.extension() {
            name.push(".");
            name.push(extension);
        }
        self.path.with_file_name(name)
    }
}

/// Which way a frame went, as seen by the capturing process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Received from the peer.
    In,
    /// Sent to the peer.
    Out,
}

/// A link as the capture declares it in each file.
#[derive(Debug)]
struct Link {
    name: String,
    description: String,
    /// Its interface number in the current file.
    interface: u32,
}

/// A packet capture being written: btl frames, one pcapng interface per
/// link, into a ring of files (see [`CaptureConfig`]) that Wireshark opens
/// with the dissector of the repository's `wireshark` directory.
///
/// Each file starts with its own section header and declares every link
/// known when it starts, so it can be read alone once older ones are gone.
/// Memory stays bounded: a buffer, and the names of the known links.
#[derive(Debug)]
pub struct Capture {
    config: CaptureConfig,
    out: BufWriter<File>,
    /// The current file's number.
    index: u64,
    /// Bytes written to the current file.
    written: u64,
    /// Whether the current file holds a frame: until it does, a frame goes
    /// in whatever its size.
    has_frames: bool,
    /// Interfaces declared in the current file.
    interfaces: u32,
    links: BTreeMap<u32, Link>,
}

impl Capture {
    /// Starts a capture: creates (or truncates) the ring's first file.
    /// Fails with [`io::ErrorKind::InvalidInput`] for a ring of no files.
    pub fn create(config: CaptureConfig) -> io::Result<Capture> {
        if config.files == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a capture needs at least one file",
            ));
        }
        let (out, written) = open(&config.file_path(0))?;
        Ok(Capture {
            config,
            out,
            index: 0,
            written,
            has_frames: false,
            interfaces: 0,
            links: BTreeMap::new(),
        })
    }

    /// Declares the link `link` (a key of the caller's choosing, which
    /// [`frame`](Self::frame) names it by) with a name and a description
    /// that Wireshark shows. Declaring a known link again, once it is
    /// reused for another peer or connection, gives it a new interface
    /// with the new description; its earlier frames keep the old one.
    pub fn add_link(&mut self, link: u32, name: &str, description: &str) -> io::Result<()> {
        let interface = self.declare(name, description)?;
        self.links.insert(
            link,
            Link {
                name: name.to_owned(),
                description: description.to_owned(),
                interface,
            },
        );
        Ok(())
    }

    /// Forgets `link`: the next files no longer declare it, and a frame on
    /// it is an error until it is added again.
    pub fn remove_link(&mut self, link: u32) {
        self.links.remove(&link);
    }

    /// Writes one frame that went `direction` on `link` at `time_ns`
    /// (nanoseconds since the Unix epoch), given as pieces that make up
    /// the whole frame in order (as a vectored write sends it). At most
    /// [`snaplen`](CaptureConfig::snaplen) bytes of it are kept.
    ///
    /// Fails with [`io::ErrorKind::InvalidInput`] for a link not
    /// [added](Self::add_link).
    pub fn frame(
        &mut self,
        link: u32,
        direction: Direction,
        time_ns: u64,
        frame: &[&[u8]],
    ) -> io::Result<()> {
        let len = frame.iter().map(|piece| piece.len()).sum();
        self.frame_prefix(link, direction, time_ns, frame, len)
    }

    /// Writes a frame of `len` bytes of which only the first are at hand,
    /// in `prefix` (pieces, as for [`frame`](Self::frame)): what a
    /// [`FrameCutter`](super::FrameCutter) reports.
    pub fn frame_prefix(
        &mut self,
        link: u32,
        direction: Direction,
        time_ns: u64,
        prefix: &[&[u8]],
        len: usize,
    ) -> io::Result<()> {
        let unknown = || {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("capture: frame on link {link}, which was not added"),
            )
        };
        if !self.links.contains_key(&link) {
            return Err(unknown());
        }
        let at_hand = prefix.iter().map(|piece| piece.len()).sum::<usize>();
        let kept = at_hand.min(self.config.snaplen as usize);
        let captured = EXPORTED_PDU_HEADER.len() + kept;
        if self.has_frames
            && self.written.saturating_add(block::epb_len(captured)) > self.config.file_bytes
        {
            self.rotate()?;
        }
        let interface = self.links.get(&link).ok_or_else(unknown)?.interface;
        let original_len = u32::try_from(len.max(kept).saturating_add(EXPORTED_PDU_HEADER.len()))
            .unwrap_or(u32::MAX);
        let info = PacketInfo {
            interface,
            time_ns,
            original_len,
            direction,
        };
        self.written += block::write_epb(&mut self.out, &info, prefix, kept)?;
        self.has_frames = true;
        Ok(())
    }

    /// Writes what is buffered to the current file.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The files of the ring that exist now, oldest first.
    pub fn files(&self) -> Vec<PathBuf> {
        let first = (self.index + 1).saturating_sub(u64::from(self.config.files));
        (first..=self.index)
            .map(|index| self.config.file_path(index))
            .collect()
    }

    /// Writes an IDB to the current file and returns its interface number.
    fn declare(&mut self, name: &str, description: &str) -> io::Result<u32> {
        let snaplen = self.idb_snaplen();
        self.written += block::write_idb(&mut self.out, name, description, snaplen)?;
        let interface = self.interfaces;
        self.interfaces += 1;
        Ok(interface)
    }

    /// The snap length an IDB announces: the exported-PDU header and what
    /// is kept of a frame.
    fn idb_snaplen(&self) -> u32 {
        self.config
            .snaplen
            .saturating_add(EXPORTED_PDU_HEADER.len() as u32)
    }

    /// Starts the next file, declares the known links in it, and deletes
    /// the file that falls out of the ring.
    fn rotate(&mut self) -> io::Result<()> {
        self.out.flush()?;
        let index = self.index + 1;
        let (out, written) = open(&self.config.file_path(index))?;
        self.out = out;
        self.index = index;
        self.written = written;
        self.has_frames = false;
        self.interfaces = 0;
        let snaplen = self.idb_snaplen();
        for link in self.links.values_mut() {
            self.written +=
                block::write_idb(&mut self.out, &link.name, &link.description, snaplen)?;
            link.interface = self.interfaces;
            self.interfaces += 1;
        }
        if let Some(oldest) = index.checked_sub(u64::from(self.config.files)) {
            match fs::remove_file(self.config.file_path(oldest)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }
}

/// Creates the file at `path` with its section header, and returns it and
/// the bytes written.
fn open(path: &Path) -> io::Result<(BufWriter<File>, u64)> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    // Readable by its owner only: a frame holds the start of a message.
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut out = BufWriter::new(options.open(path)?);
    let written = block::write_shb(&mut out)?;
    Ok((out, written))
}
