//! Packet captures of btl frames, for Wireshark.
//!
//! A [`Capture`] writes the frames a process sends and receives, each with
//! its link, direction and time, to pcapng files that Wireshark and
//! `tshark` read with the dissector in the repository's `wireshark`
//! directory. It records btl's frames rather than the IP packets that
//! carry them: one record per frame whatever the transport (a TCP segment
//! may hold several frames, or part of one), seen as the engine sent and
//! received them, with their direction and link, and without the need for
//! the privileges a network capture takes.
//!
//! Each record's link type is `LINKTYPE_WIRESHARK_UPPER_PDU` with the
//! dissector name `btl`. The files form a ring of bounded size (see
//! [`CaptureConfig`]), each readable alone, and of each frame at most
//! `snaplen` bytes are kept: the header and fixed fields, which say what
//! happened, and the start of any payload.
//!
//! Over a stream, a driver that sees bytes rather than frames cuts them
//! back into frames with a [`FrameCutter`] per direction of a connection.
//!
//! The TCP and UDP modules capture when `btl_<c>_capture` names a path
//! (with `btl_<c>_capture_file_size`, `_files` and `_snaplen`): their
//! transports feed a `Tap`, which stamps each frame with its time and
//! stops, with a warning, if the files cannot be written.

mod block;
mod cutter;
mod ring;
mod tap;

#[cfg(test)]
mod tests;

pub use cutter::FrameCutter;
pub use ring::{Capture, CaptureConfig, Direction};
pub(crate) use tap::{NO_LINK, Tap, describe, link_key};
