//! Cuts a stream's bytes back into frames, for a capture of a stream
//! transport whose reads and writes start and end anywhere in a frame.

use btl_core::wire::{HEADER_LEN, Header, Limits, MAX_MAX_BODY};

/// Cuts the bytes of one direction of a stream (frames back to back,
/// nothing in between) into frames, as they come in pieces of any size.
///
/// Each frame's length comes from its header (the first 32 bytes). Of each
/// frame the cutter keeps the first `snaplen` bytes (and always the
/// header), and only counts the rest, so its memory is bounded whatever the
/// frames' sizes. A header that does not decode means the stream is not
/// btl, or the cutter started in the middle of a frame: it then gives up
/// for good ([`is_lost`](Self::is_lost)), since no later byte can be placed.
#[derive(Debug, Clone)]
pub struct FrameCutter {
    snaplen: usize,
    /// The current frame's first bytes: its header, then up to `snaplen`.
    head: Vec<u8>,
    /// The current frame's length, once its header is in.
    frame_len: Option<usize>,
    /// Bytes of the current frame seen so far.
    seen: usize,
    lost: bool,
}

impl FrameCutter {
    /// A cutter at the start of a stream that reports the first `snaplen`
    /// bytes of each frame.
    pub fn new(snaplen: usize) -> Self {
        FrameCutter {
            snaplen,
            head: Vec::with_capacity(snaplen.max(HEADER_LEN)),
            frame_len: None,
            seen: 0,
            lost: false,
        }
    }

    /// Takes the stream's next bytes, and calls `on_frame` with the first
    /// `min(length, snaplen)` bytes and the length of each frame they
    /// complete, in order.
    pub fn feed(&mut self, mut bytes: &[u8], mut on_frame: impl FnMut(&[u8], usize)) {
        let keep = self.snaplen.max(HEADER_LEN);
        while !bytes.is_empty() && !self.lost {
            let frame_len = match self.frame_len {
                Some(len) => len,
                None => {
                    let (header, rest) = bytes.split_at(bytes.len().min(HEADER_LEN - self.seen));
                    self.head.extend_from_slice(header);
                    self.seen += header.len();
                    bytes = rest;
                    if self.seen < HEADER_LEN {
                        return;
                    }
                    let limits = Limits::new(MAX_MAX_BODY);
                    match Header::new_checked(&self.head[..]).and_then(|h| h.frame_len(&limits)) {
                        Ok(len) => {
                            self.frame_len = Some(len);
                            len
                        }
                        Err(_) => {
                            self.lost = true;
                            self.head = Vec::new();
                            return;
                        }
                    }
                }
            };
            let (part, rest) = bytes.split_at(bytes.len().min(frame_len - self.seen));
            let room = keep.saturating_sub(self.head.len()).min(part.len());
            self.head.extend_from_slice(&part[..room]);
            self.seen += part.len();
            bytes = rest;
            if self.seen == frame_len {
                on_frame(&self.head[..self.head.len().min(self.snaplen)], frame_len);
                self.head.clear();
                self.frame_len = None;
                self.seen = 0;
            }
        }
    }

    /// Whether a header failed to decode: the cutter reports no more
    /// frames, whatever it is fed.
    pub fn is_lost(&self) -> bool {
        self.lost
    }
}

#[cfg(test)]
mod tests {
    use btl_core::wire::{self, Flags, HeaderRepr, PacketRepr, PutRepr, SendRepr};

    use super::*;

    fn send(tag: u8, payload: &[u8], flags: Flags) -> Vec<u8> {
        let packet = PacketRepr::Send {
            send: SendRepr { tag },
            payload,
        };
        let header = HeaderRepr {
            flags,
            seq: 1,
            ..HeaderRepr::new(&packet)
        };
        let mut frame = vec![0; header.frame_len().expect("frame length")];
        wire::emit(&header, &packet, &mut frame).expect("emit");
        frame
    }

    fn put(data: &[u8]) -> Vec<u8> {
        let packet = PacketRepr::Put {
            put: PutRepr {
                xfer_id: 1,
                handle: 2,
                offset: 0,
                total_len: data.len() as u64,
                index: 0,
                count: 1,
            },
            data,
        };
        let header = HeaderRepr {
            seq: 2,
            ..HeaderRepr::new(&packet)
        };
        let mut frame = vec![0; header.frame_len().expect("frame length")];
        wire::emit(&header, &packet, &mut frame).expect("emit");
        frame
    }

    /// Feeds `pieces` and returns what the cutter reported.
    fn cut(cutter: &mut FrameCutter, pieces: &[&[u8]]) -> Vec<(Vec<u8>, usize)> {
        let mut frames = Vec::new();
        for piece in pieces {
            cutter.feed(piece, |head, len| frames.push((head.to_vec(), len)));
        }
        frames
    }

    fn stream() -> (Vec<u8>, Vec<Vec<u8>>) {
        let frames = vec![
            send(1, b"hi", Flags::CHECKSUM),
            put(&[7; 40]),
            send(2, b"", Flags::empty()),
        ];
        (frames.concat(), frames)
    }

    #[test]
    fn finds_frames_split_at_every_byte() {
        let (stream, frames) = stream();
        for at in 0..=stream.len() {
            let mut cutter = FrameCutter::new(1024);
            let (a, b) = stream.split_at(at);
            let got = cut(&mut cutter, &[a, b]);
            let want: Vec<_> = frames.iter().map(|f| (f.clone(), f.len())).collect();
            assert_eq!(got, want, "split at {at}");
        }
        let mut cutter = FrameCutter::new(1024);
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(cut(&mut cutter, &bytes).len(), 3, "a byte at a time");
        assert!(!cutter.is_lost());
    }

    #[test]
    fn finds_several_frames_in_one_piece() {
        let (stream, frames) = stream();
        let mut cutter = FrameCutter::new(1024);
        let got = cut(&mut cutter, &[&stream]);
        let lens: Vec<usize> = got.iter().map(|(_, len)| *len).collect();
        assert_eq!(lens, frames.iter().map(Vec::len).collect::<Vec<_>>());
    }

    #[test]
    fn keeps_snaplen_bytes_of_a_long_frame() {
        let long = put(&[9; 1000]);
        let next = send(3, b"after", Flags::empty());
        let stream = [long.clone(), next.clone()].concat();
        for snaplen in [0, 16, 32, 100] {
            let mut cutter = FrameCutter::new(snaplen);
            let pieces: Vec<&[u8]> = stream.chunks(7).collect();
            let got = cut(&mut cutter, &pieces);
            assert_eq!(
                got,
                vec![
                    (long[..snaplen].to_vec(), long.len()),
                    (next[..snaplen.min(next.len())].to_vec(), next.len()),
                ],
                "snaplen {snaplen}"
            );
            assert!(cutter.head.capacity() <= 1000, "bounded memory");
        }
    }

    #[test]
    fn gives_up_on_garbage() {
        let mut cutter = FrameCutter::new(64);
        let frame = send(1, b"ok", Flags::empty());
        let mut garbage = frame.clone();
        garbage.extend_from_slice(&[0xff; 40]);
        garbage.extend_from_slice(&frame);
        let got = cut(&mut cutter, &[&garbage[..50], &garbage[50..]]);
        assert_eq!(got, vec![(frame.clone(), frame.len())]);
        assert!(cutter.is_lost());
        assert!(cut(&mut cutter, &[&frame]).is_empty(), "nothing after");
    }
}
