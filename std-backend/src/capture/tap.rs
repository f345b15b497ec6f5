//! A module's capture as its transport feeds it: the [`Capture`] with its
//! clock, and what becomes of an error. Capturing is a diagnostic: a
//! capture file that cannot be written (a full disk) stops the capture,
//! with one warning, and never the module.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use btl_core::endpoint::ProcName;
use btl_core::engine::LinkId;

use super::{Capture, CaptureConfig, Direction};

/// How long frames may wait in the writer's buffer: a capture being
/// written is readable (`tail -f`, Wireshark reloading it) this far
/// behind, whatever the traffic.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// The key of the interface that carries what no link does: a refused
/// connection's CLOSE, a stranger's datagrams and the answers to them.
pub(crate) const NO_LINK: u32 = u32::MAX;

/// The key of engine link `link`'s interface: its slot, which no two live
/// links share, and which the engine's logs name too.
pub(crate) fn link_key(link: LinkId) -> u32 {
    u32::try_from(link.slot()).unwrap_or(NO_LINK - 1)
}

/// What a link's interface says of it: its two ends, and its peer when
/// this side knows it (one it connected to; one that connected names
/// itself in its HELLO).
pub(crate) fn describe(
    local: Option<SocketAddr>,
    remote: SocketAddr,
    peer: Option<ProcName>,
) -> String {
    let local = local.map_or_else(|| "?".to_owned(), |at| at.to_string());
    match peer {
        Some(peer) if !peer.is_unnamed() => {
            format!("local {local}, remote {remote}, peer {peer}")
        }
        Some(_) => format!(
            "local {local}, remote {remote}, a peer reached by its address (its HELLO names it)"
        ),
        None => format!("local {local}, remote {remote}, accepted (its HELLO names the peer)"),
    }
}

/// The capture of one module: frames in, each stamped with the time it
/// was seen, one pcapng interface per key (a link, or the traffic of no
/// link).
#[derive(Debug)]
pub(crate) struct Tap {
    /// `None` once writing failed: the capture has stopped.
    capture: Option<Capture>,
    /// The ring's path, for the warning of a failure.
    path: PathBuf,
    /// The component, for the same.
    component: &'static str,
    snaplen: usize,
    /// Nanoseconds since the Unix epoch when the capture started: each
    /// frame's time is this and the monotonic time since `started`, so the
    /// wall clock is read once and a frame's time never goes back.
    epoch_ns: u64,
    started: Instant,
    /// When the buffer was last written out.
    flushed: Instant,
}

impl Tap {
    /// Starts the capture `config` describes for process `me` of
    /// `component`: `{job}` and `{rank}` in its path become the process's,
    /// so that the processes of a job given one path write apart. Fails
    /// with an error that names the file, what the system said and what to
    /// do.
    pub(crate) fn open(
        component: &'static str,
        me: ProcName,
        mut config: CaptureConfig,
    ) -> io::Result<Tap> {
        config.path = for_process(&config.path, me);
        let path = config.path.clone();
        let first = config.file_path(0);
        let snaplen = config.snaplen as usize;
        let capture = Capture::create(config).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "btl_{component}_capture: cannot create the capture file {}: {e}; give a path this process may write (its directories are made), or leave btl_{component}_capture empty to capture nothing",
                    first.display()
                ),
            )
        })?;
        let started = Instant::now();
        let epoch_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
            });
        tracing::info!(
            "{component} {me}: capturing its frames to {}",
            first.display()
        );
        Ok(Tap {
            capture: Some(capture),
            path,
            component,
            snaplen,
            epoch_ns,
            started,
            flushed: started,
        })
    }

    /// Whether frames are still written: a transport feeds its frame
    /// cutters only then.
    pub(crate) fn is_on(&self) -> bool {
        self.capture.is_some()
    }

    /// Bytes kept of each frame.
    pub(crate) fn snaplen(&self) -> usize {
        self.snaplen
    }

    /// Declares the interface of `key` ([`Capture::add_link`]).
    pub(crate) fn add_link(&mut self, key: u32, name: &str, description: &str) {
        if let Some(capture) = self.capture.as_mut() {
            let result = capture.add_link(key, name, description);
            self.check(result);
        }
    }

    /// Forgets the interface of `key` ([`Capture::remove_link`]).
    pub(crate) fn remove_link(&mut self, key: u32) {
        if let Some(capture) = self.capture.as_mut() {
            capture.remove_link(key);
        }
    }

    /// Writes a whole frame, in pieces ([`Capture::frame`]).
    pub(crate) fn frame(&mut self, key: u32, direction: Direction, pieces: &[&[u8]]) {
        let len = pieces.iter().map(|piece| piece.len()).sum();
        self.frame_prefix(key, direction, pieces, len);
    }

    /// Writes a frame of `len` bytes of which `prefix` holds the first
    /// ([`Capture::frame_prefix`]).
    pub(crate) fn frame_prefix(
        &mut self,
        key: u32,
        direction: Direction,
        prefix: &[&[u8]],
        len: usize,
    ) {
        let Some(capture) = self.capture.as_mut() else {
            return;
        };
        let now = Instant::now();
        let since = u64::try_from(now.duration_since(self.started).as_nanos()).unwrap_or(u64::MAX);
        let time_ns = self.epoch_ns.saturating_add(since);
        let mut result = capture.frame_prefix(key, direction, time_ns, prefix, len);
        if result.is_ok() && now.duration_since(self.flushed) >= FLUSH_EVERY {
            self.flushed = now;
            result = capture.flush();
        }
        self.check(result);
    }

    /// Stops the capture on a write error, with one warning. A frame the
    /// capture refuses (of a key not declared) is a slip of the caller's,
    /// not of the file: it is left out, and the capture goes on.
    fn check(&mut self, result: io::Result<()>) {
        match result {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                tracing::debug!("{} capture: a frame left out: {e}", self.component);
            }
            Err(e) => {
                tracing::warn!(
                    "btl_{}_capture: writing the capture {} failed: {e}; capturing stops, the module carries on",
                    self.component,
                    self.path.display()
                );
                self.capture = None;
            }
        }
    }
}

impl Drop for Tap {
    /// Writes out what is buffered, so that a module closed or dropped
    /// leaves its capture whole.
    fn drop(&mut self) {
        if let Some(capture) = self.capture.as_mut() {
            let result = capture.flush();
            self.check(result);
        }
    }
}

/// `path` with `{job}` and `{rank}` replaced by `me`'s.
fn for_process(path: &std::path::Path, me: ProcName) -> PathBuf {
    match path.to_str() {
        Some(text) if text.contains("{job}") || text.contains("{rank}") => PathBuf::from(
            text.replace("{job}", &me.job.to_string())
                .replace("{rank}", &me.rank.to_string()),
        ),
        _ => path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_names_its_files() {
        let me = ProcName::new(7, 3);
        assert_eq!(
            for_process(std::path::Path::new("cap/{job}/btl.{rank}.pcapng"), me),
            PathBuf::from("cap/7/btl.3.pcapng")
        );
        assert_eq!(
            for_process(std::path::Path::new("btl.pcapng"), me),
            PathBuf::from("btl.pcapng")
        );
    }

    #[test]
    fn a_file_that_cannot_be_made_is_an_error_that_says_what_to_do() {
        // Its directory cannot be made: a file is in the way.
        let file = std::env::temp_dir().join(format!("btl-tap-file-{}", std::process::id()));
        std::fs::write(&file, b"").expect("a file");
        let at = file.join("btl.pcapng");
        let error = Tap::open("tcp", ProcName::new(1, 0), CaptureConfig::new(&at))
            .expect_err("no directory can be made there");
        let _ = std::fs::remove_file(&file);
        let text = error.to_string();
        assert!(text.contains("btl.0.pcapng"), "{text}");
        assert!(
            text.contains("File exists") || text.contains("Not a directory"),
            "{text}"
        );
        assert!(text.contains("btl_tcp_capture empty"), "{text}");
    }
}
