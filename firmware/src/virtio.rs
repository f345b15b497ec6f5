//! virtio-net on the virtio-mmio bus of QEMU `virt`: a DMA [`Hal`] over a
//! static area, the probe of the bus, and a [`smoltcp::phy::Device`] over the
//! crate's allocation-free raw driver.
//!
//! Receive and transmit buffers are fixed arrays lent at start-up. Every
//! receive buffer is posted to the device; the one smoltcp has just read is
//! posted again on the next call. A transmit buffer is busy from
//! `transmit_begin` until the device returns it on the used ring.

use core::ptr::NonNull;
use core::sync::atomic::{AtomicUsize, Ordering};

use smoltcp::phy::{self, DeviceCapabilities, Medium};
use smoltcp::time::Instant;
use virtio_drivers::device::net::VirtIONetRaw;
use virtio_drivers::transport::mmio::{MmioTransport, VirtIOHeader};
use virtio_drivers::transport::{DeviceType, Transport};
use virtio_drivers::{BufferDirection, Hal, PAGE_SIZE, PhysAddr};

/// First virtio-mmio slot on QEMU `virt`.
const MMIO_BASE: usize = 0x1000_1000;
/// Distance between two slots (and size of each).
const MMIO_STRIDE: usize = 0x1000;
/// Number of virtio-mmio slots on QEMU `virt`.
const MMIO_SLOTS: usize = 8;

/// Pages of the DMA area. The two virtqueues of 16 entries take 2 pages each
/// (modern layout: driver area + device area; the legacy layout also takes
/// 2): 8 pages leave room to spare.
const DMA_PAGES: usize = 8;

/// Entries per virtqueue (a power of two).
pub const QUEUE_SIZE: usize = 16;
/// Size of one packet buffer: the 12-byte virtio-net header plus a 1514-byte
/// Ethernet frame, rounded up; the driver wants receive buffers of at least
/// 1526 bytes.
pub const BUF_LEN: usize = 1536;
/// Receive buffers: one per receive-queue entry.
pub const RX_BUFS: usize = QUEUE_SIZE;
/// Transmit buffers (each takes one transmit-queue entry).
pub const TX_BUFS: usize = 8;
/// Largest Ethernet frame (without FCS) the device is given.
pub const MTU: usize = 1514;

/// The page-aligned memory handed out by [`DmaHal`].
#[repr(C, align(4096))]
struct DmaArea(core::cell::UnsafeCell<[u8; DMA_PAGES * PAGE_SIZE]>);

// SAFETY: the area is only reached through `DmaHal::dma_alloc`, which hands
// out each page at most once (the bump index only grows), so no two users
// ever share a page.
unsafe impl Sync for DmaArea {}

static DMA_AREA: DmaArea = DmaArea(core::cell::UnsafeCell::new([0; DMA_PAGES * PAGE_SIZE]));
/// Index of the next free page of `DMA_AREA`.
static DMA_NEXT: AtomicUsize = AtomicUsize::new(0);

/// The DMA glue for virtio-drivers: a bump allocator over a static area.
/// Physical and virtual addresses are the same (no MMU), and QEMU's DMA is
/// cache-coherent, so sharing a buffer is just giving its address.
#[derive(Debug)]
pub struct DmaHal;

// SAFETY: `dma_alloc` returns zeroed, page-aligned memory that no one else
// uses (each page is handed out once and never freed); the addresses
// returned are the ones the device must use since physical == virtual.
unsafe impl Hal for DmaHal {
    fn dma_alloc(pages: usize, _direction: BufferDirection) -> (PhysAddr, NonNull<u8>) {
        let reserved = DMA_NEXT.fetch_update(Ordering::AcqRel, Ordering::Acquire, |next| {
            next.checked_add(pages).filter(|&end| end <= DMA_PAGES)
        });
        let Ok(first) = reserved else {
            log::warn!("DMA area exhausted ({pages} pages asked)");
            // A physical address of 0 tells the driver the allocation failed.
            return (0, NonNull::dangling());
        };
        let base = DMA_AREA.0.get().cast::<u8>();
        // SAFETY: first + pages <= DMA_PAGES, so the range lies inside the
        // area; those pages were never handed out before, so nothing else
        // refers to them while they are zeroed.
        let ptr = unsafe {
            let ptr = base.add(first * PAGE_SIZE);
            core::ptr::write_bytes(ptr, 0, pages * PAGE_SIZE);
            ptr
        };
        // A pointer into a static is never null.
        let ptr = NonNull::new(ptr).unwrap_or(NonNull::dangling());
        (ptr.as_ptr() as usize as PhysAddr, ptr)
    }

    unsafe fn dma_dealloc(_paddr: PhysAddr, _vaddr: NonNull<u8>, _pages: usize) -> i32 {
        // A bump allocator frees nothing; the firmware never drops a queue.
        0
    }

    unsafe fn mmio_phys_to_virt(paddr: PhysAddr, _size: usize) -> NonNull<u8> {
        NonNull::new(paddr as usize as *mut u8).unwrap_or(NonNull::dangling())
    }

    unsafe fn share(buffer: NonNull<[u8]>, _direction: BufferDirection) -> PhysAddr {
        buffer.cast::<u8>().as_ptr() as usize as PhysAddr
    }

    unsafe fn unshare(_paddr: PhysAddr, _buffer: NonNull<[u8]>, _direction: BufferDirection) {}
}

/// The raw virtio-net driver as this firmware instantiates it.
type RawNet = VirtIONetRaw<DmaHal, MmioTransport<'static>, QUEUE_SIZE>;

/// Packet buffers for one [`VirtioNet`], to be reserved in a static.
#[derive(Debug)]
pub struct Buffers {
    rx: [[u8; BUF_LEN]; RX_BUFS],
    tx: [[u8; BUF_LEN]; TX_BUFS],
}

impl Buffers {
    /// Zeroed buffers (they land in `.bss`).
    pub const fn new() -> Self {
        Self {
            rx: [[0; BUF_LEN]; RX_BUFS],
            tx: [[0; BUF_LEN]; TX_BUFS],
        }
    }
}

impl Default for Buffers {
    fn default() -> Self {
        Self::new()
    }
}

/// Why [`VirtioNet::probe`] found no usable device.
#[derive(Debug)]
pub enum ProbeError {
    /// No virtio-mmio slot holds a network device.
    NotFound,
    /// The device was found but could not be set up.
    Driver(virtio_drivers::Error),
}

/// Counters of the device, for the console.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Frames received and handed to smoltcp.
    pub rx_frames: u64,
    /// Frames handed to the device for transmission.
    pub tx_frames: u64,
    /// Frames smoltcp gave that the device refused.
    pub tx_dropped: u64,
}

/// A virtio-net device as a smoltcp [`phy::Device`].
pub struct VirtioNet {
    raw: RawNet,
    /// Base of the receive buffers. Buffer `i` belongs to the device while
    /// `rx_token[i]` is `Some`, to this driver otherwise.
    rx_base: NonNull<[u8; BUF_LEN]>,
    rx_token: [Option<u16>; RX_BUFS],
    /// The buffer lent to smoltcp by the last `receive`, to post again.
    rx_lent: Option<usize>,
    /// Base of the transmit buffers. Buffer `i` belongs to the device while
    /// `tx_inflight[i]` is `Some((token, length))`.
    tx_base: NonNull<[u8; BUF_LEN]>,
    tx_inflight: [Option<(u16, usize)>; TX_BUFS],
    stats: Stats,
}

impl VirtioNet {
    /// Looks for a network device on the virtio-mmio slots, sets it up with
    /// `buffers` and posts every receive buffer.
    pub fn probe(buffers: &'static mut Buffers) -> Result<Self, ProbeError> {
        for slot in 0..MMIO_SLOTS {
            let addr = MMIO_BASE + slot * MMIO_STRIDE;
            let Some(header) = NonNull::new(addr as *mut VirtIOHeader) else {
                continue;
            };
            // SAFETY: on QEMU `virt`, each slot is a 4 KiB virtio-mmio
            // register window, always mapped (no MMU) and valid forever; each
            // slot is opened once, and a transport that is not kept is
            // dropped before the next slot is looked at.
            let transport = match unsafe { MmioTransport::new(header, MMIO_STRIDE) } {
                Ok(t) => t,
                // An empty slot reads as device id 0, which is an error here.
                Err(_) => continue,
            };
            if transport.device_type() != DeviceType::Network {
                continue;
            }
            log::info!(
                "virtio-net at {addr:#x}, mmio {:?}, vendor {:#x}",
                transport.version(),
                transport.vendor_id()
            );
            let raw = RawNet::new(transport).map_err(ProbeError::Driver)?;
            return Self::with_raw(raw, buffers).map_err(ProbeError::Driver);
        }
        Err(ProbeError::NotFound)
    }

    fn with_raw(raw: RawNet, buffers: &'static mut Buffers) -> virtio_drivers::Result<Self> {
        // From here on the buffers are reached only through these pointers,
        // and the `&'static mut` is gone, so this driver owns them.
        let rx_base = NonNull::from(&mut buffers.rx).cast::<[u8; BUF_LEN]>();
        let tx_base = NonNull::from(&mut buffers.tx).cast::<[u8; BUF_LEN]>();
        let mut dev = Self {
            raw,
            rx_base,
            rx_token: [None; RX_BUFS],
            rx_lent: None,
            tx_base,
            tx_inflight: [None; TX_BUFS],
            stats: Stats::default(),
        };
        for i in 0..RX_BUFS {
            dev.post_rx(i)?;
        }
        Ok(dev)
    }

    /// The MAC address the device reports.
    pub fn mac(&self) -> [u8; 6] {
        self.raw.mac_address()
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Receive buffer `i`, which must belong to this driver.
    ///
    /// # Safety
    ///
    /// `i < RX_BUFS`, the device does not own buffer `i`, and no other
    /// reference to it is alive while the returned one is.
    unsafe fn rx_buf<'a>(&self, i: usize) -> &'a mut [u8; BUF_LEN] {
        // SAFETY: i < RX_BUFS keeps the pointer inside the array, and the
        // caller guarantees exclusive access.
        unsafe { &mut *self.rx_base.as_ptr().add(i) }
    }

    /// Transmit buffer `i`, with the same contract as [`Self::rx_buf`].
    ///
    /// # Safety
    ///
    /// As for [`Self::rx_buf`], with `TX_BUFS`.
    unsafe fn tx_buf<'a>(&self, i: usize) -> &'a mut [u8; BUF_LEN] {
        // SAFETY: as in `rx_buf`.
        unsafe { &mut *self.tx_base.as_ptr().add(i) }
    }

    /// Hands receive buffer `i` to the device.
    fn post_rx(&mut self, i: usize) -> virtio_drivers::Result<()> {
        debug_assert!(self.rx_token[i].is_none());
        // SAFETY: rx_token[i] is None, so the buffer is ours and unborrowed
        // (the only borrow, an RxToken, ended with the `&mut self` it came
        // from).
        let buf = unsafe { self.rx_buf(i) };
        // SAFETY: the buffer is a static that nothing touches until the
        // device gives it back through `receive_complete` (rx_token[i] marks
        // it as the device's until then).
        let token = unsafe { self.raw.receive_begin(buf)? };
        self.rx_token[i] = Some(token);
        Ok(())
    }

    /// Takes back the transmit buffers the device is done with.
    fn reclaim_tx(&mut self) {
        while let Some(token) = self.raw.poll_transmit() {
            let Some(i) = self
                .tx_inflight
                .iter()
                .position(|t| matches!(t, Some((tok, _)) if *tok == token))
            else {
                panic!("virtio-net: used transmit token {token} is not ours");
            };
            let Some((_, len)) = self.tx_inflight[i] else {
                unreachable!()
            };
            // SAFETY: the device has finished with buffer i (its token is on
            // the used ring); no reference to it exists.
            let buf = unsafe { self.tx_buf(i) };
            // SAFETY: the same slice (address and length) as was given to
            // `transmit_begin` for this token.
            if let Err(e) = unsafe { self.raw.transmit_complete(token, &buf[..len]) } {
                log::warn!("virtio-net: transmit completion failed: {e:?}");
            }
            self.tx_inflight[i] = None;
        }
    }

    /// A transmit buffer that is free, if the queue has room too.
    fn free_tx(&self) -> Option<usize> {
        if !self.raw.can_send() {
            return None;
        }
        self.tx_inflight.iter().position(Option::is_none)
    }

    /// Posts again the receive buffer lent to smoltcp last time.
    fn repost_lent(&mut self) {
        if let Some(i) = self.rx_lent.take()
            && let Err(e) = self.post_rx(i)
        {
            // Cannot happen with one queue entry per buffer; keep it out of
            // the ring rather than stop.
            log::warn!("virtio-net: reposting receive buffer {i} failed: {e:?}");
        }
    }
}

/// A received frame, lent to smoltcp.
pub struct RxToken<'a> {
    frame: &'a [u8],
}

/// A transmit buffer, lent to smoltcp.
pub struct TxToken<'a> {
    raw: &'a mut RawNet,
    buf: &'a mut [u8; BUF_LEN],
    slot: &'a mut Option<(u16, usize)>,
    stats: &'a mut Stats,
}

impl phy::RxToken for RxToken<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(self.frame)
    }
}

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let hdr = match self.raw.fill_buffer_header(self.buf) {
            Ok(hdr) => hdr,
            Err(e) => panic!("virtio-net: header does not fit a buffer: {e:?}"),
        };
        assert!(
            len <= BUF_LEN - hdr,
            "virtio-net: frame of {len} bytes > MTU"
        );
        let result = f(&mut self.buf[hdr..hdr + len]);
        let total = hdr + len;
        // SAFETY: the buffer is a static that this driver does not touch
        // until the device returns the token (`reclaim_tx`); `slot` records
        // that it is the device's meanwhile.
        match unsafe { self.raw.transmit_begin(&self.buf[..total]) } {
            Ok(token) => {
                *self.slot = Some((token, total));
                self.stats.tx_frames += 1;
            }
            Err(e) => {
                log::warn!("virtio-net: transmit failed: {e:?}");
                self.stats.tx_dropped += 1;
            }
        }
        result
    }
}

impl phy::Device for VirtioNet {
    type RxToken<'a> = RxToken<'a>;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _timestamp: Instant) -> Option<(RxToken<'_>, TxToken<'_>)> {
        self.repost_lent();
        self.reclaim_tx();
        let token = self.raw.poll_receive()?;
        // smoltcp may answer at once (ARP, TCP ACK): a frame is taken only
        // when a transmit buffer is free, else it waits in the used ring.
        let tx = self.free_tx()?;
        let Some(i) = self.rx_token.iter().position(|t| *t == Some(token)) else {
            panic!("virtio-net: used receive token {token} is not ours");
        };
        self.rx_token[i] = None;
        // Posted again on the next call, when the RxToken is gone.
        self.rx_lent = Some(i);
        // SAFETY: the device has completed buffer i (its token is on the
        // used ring) and rx_token[i] is now None; the returned reference
        // lives as long as the `&mut self` borrow, and the buffer is posted
        // again only after that (in `repost_lent`).
        let buf = unsafe { self.rx_buf(i) };
        // SAFETY: the same buffer as was given to `receive_begin` with this
        // token.
        let (hdr, len) = match unsafe { self.raw.receive_complete(token, buf) } {
            Ok(v) => v,
            Err(e) => {
                log::warn!("virtio-net: bad receive completion: {e:?}");
                return None;
            }
        };
        let frame = buf.get(hdr..hdr + len)?;
        self.stats.rx_frames += 1;
        // SAFETY: tx < TX_BUFS and tx_inflight[tx] is None: the buffer is
        // ours, and only this token will reach it.
        let tx_buf = unsafe { self.tx_buf(tx) };
        Some((
            RxToken { frame },
            TxToken {
                raw: &mut self.raw,
                buf: tx_buf,
                slot: &mut self.tx_inflight[tx],
                stats: &mut self.stats,
            },
        ))
    }

    fn transmit(&mut self, _timestamp: Instant) -> Option<TxToken<'_>> {
        self.reclaim_tx();
        let tx = self.free_tx()?;
        // SAFETY: as in `receive`.
        let buf = unsafe { self.tx_buf(tx) };
        Some(TxToken {
            raw: &mut self.raw,
            buf,
            slot: &mut self.tx_inflight[tx],
            stats: &mut self.stats,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = MTU;
        // Frames the peer may send back to back: one per receive buffer.
        // smoltcp caps the advertised TCP window to this many segments.
        caps.max_burst_size = Some(RX_BUFS);
        caps
    }
}
