//! Listing and opening devices, and what verbs report of a device and its
//! ports in this crate's types.

use std::ffi::{CStr, c_int};
use std::io;
use std::marker::PhantomData;
use std::ptr::NonNull;

use ibverbs_sys as sys;

use crate::provider::{DeviceAttr, Gid, LinkLayer, Mtu, PortAttr, PortState, VerbsError};

use super::errno_result;

/// The error of a verbs call that returned NULL: its `errno`.
pub(super) fn last_os_error() -> VerbsError {
    VerbsError::Os(io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

/// The devices libibverbs finds, released when dropped.
pub(super) struct DeviceList {
    list: NonNull<*mut sys::ibv_device>,
    len: usize,
}

impl DeviceList {
    /// The devices present: [`VerbsError::NoDevice`] if there are none, or
    /// if the system cannot have any (no RDMA support in the kernel, no
    /// driver for the hardware).
    pub(super) fn get() -> Result<DeviceList, VerbsError> {
        let mut len: c_int = 0;
        // SAFETY: `len` is a valid place for the count; the list returned
        // is released by `Drop` only.
        let list = unsafe { sys::ibv_get_device_list(&mut len) };
        let Some(list) = NonNull::new(list) else {
            return Err(VerbsError::NoDevice(io::Error::last_os_error().to_string()));
        };
        let list = DeviceList {
            list,
            len: usize::try_from(len).unwrap_or(0),
        };
        if list.len == 0 {
            return Err(VerbsError::NoDevice("no RDMA device".to_owned()));
        }
        Ok(list)
    }

    /// The devices, in libibverbs' order.
    pub(super) fn iter(&self) -> impl Iterator<Item = Device<'_>> {
        (0..self.len).map(|i| {
            // SAFETY: the list holds `len` device pointers (then a NULL), and
            // lives as long as `self`.
            let raw = unsafe { *self.list.as_ptr().add(i) };
            Device {
                raw,
                _list: PhantomData,
            }
        })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the list came from `ibv_get_device_list` and is released
        // once. Contexts opened on its devices stay valid after.
        unsafe { sys::ibv_free_device_list(self.list.as_ptr()) }
    }
}

/// A device of a [`DeviceList`], valid while the list is.
pub(super) struct Device<'a> {
    raw: *mut sys::ibv_device,
    _list: PhantomData<&'a DeviceList>,
}

impl Device<'_> {
    /// Its kernel name (`mlx5_0`).
    pub(super) fn name(&self) -> String {
        // SAFETY: `raw` is a device of a live list.
        let name = unsafe { sys::ibv_get_device_name(self.raw) };
        if name.is_null() {
            return String::new();
        }
        // SAFETY: a non-NULL name is a NUL-terminated string that lives as
        // long as the device.
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned()
    }

    /// A context on it, which outlives the list.
    pub(super) fn open(&self) -> Result<Context, VerbsError> {
        // SAFETY: `raw` is a device of a live list.
        let ctx = unsafe { sys::ibv_open_device(self.raw) };
        NonNull::new(ctx).map(Context).ok_or_else(last_os_error)
    }
}

/// An open device context, closed when dropped (after everything
/// allocated on it is destroyed: the owner's duty).
#[derive(Debug)]
pub(super) struct Context(NonNull<sys::ibv_context>);

impl Context {
    pub(super) fn as_ptr(&self) -> *mut sys::ibv_context {
        self.0.as_ptr()
    }

    /// The driver's entry points, the data-path verbs among them (which
    /// `verbs.h` calls inline, through this table).
    pub(super) fn ops(&self) -> &sys::ibv_context_ops {
        // SAFETY: the context is open for as long as `self` lives, and its
        // table is written only while it is being opened.
        unsafe { &(*self.as_ptr()).ops }
    }

    /// The device's attributes.
    pub(super) fn query_device(&self) -> Result<sys::ibv_device_attr, VerbsError> {
        let mut attr = sys::ibv_device_attr::default();
        // SAFETY: the context is open and `attr` is a valid place for the
        // answer.
        errno_result(unsafe { sys::ibv_query_device(self.as_ptr(), &mut attr) })?;
        Ok(attr)
    }

    /// Port `port`'s attributes.
    pub(super) fn query_port(&self, port: u8) -> Result<sys::ibv_port_attr, VerbsError> {
        let mut attr = sys::ibv_port_attr::default();
        // The exported `ibv_query_port` fills the leading fields of
        // `ibv_port_attr` that its older layout (`_compat_ibv_port_attr`)
        // has, link layer included, as the header's inline wrapper relies
        // on; the rest stays zero.
        let compat = (&raw mut attr).cast::<sys::_compat_ibv_port_attr>();
        // SAFETY: the context is open; `compat` points to a whole, zeroed
        // `ibv_port_attr`, of which the call writes a prefix.
        errno_result(unsafe { sys::ibv_query_port(self.as_ptr(), port, compat) })?;
        Ok(attr)
    }

    /// The GID at `index` of port `port`.
    pub(super) fn query_gid(&self, port: u8, index: c_int) -> Result<Gid, VerbsError> {
        let mut gid = sys::ibv_gid::default();
        // SAFETY: the context is open and `gid` is a valid place for the
        // answer.
        errno_result(unsafe { sys::ibv_query_gid(self.as_ptr(), port, index, &mut gid) })?;
        Ok(gid_from_raw(&gid))
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the context was opened by `ibv_open_device` and is closed
        // once; nothing allocated on it is left (see `RdmaProvider`'s
        // `Drop`). A failure leaves nothing to do.
        unsafe { sys::ibv_close_device(self.as_ptr()) };
    }
}

/// The attributes of each device present.
///
/// Every device is opened for the query and closed again. Fails with
/// [`VerbsError::NoDevice`], saying why, when there is no device, and with
/// [`VerbsError::Os`] when a device cannot be opened or queried.
pub fn devices() -> Result<Vec<DeviceAttr>, VerbsError> {
    let list = DeviceList::get()?;
    list.iter()
        .map(|device| {
            let attr = device.open()?.query_device()?;
            Ok(device_attr(device.name(), &attr))
        })
        .collect()
}

/// What this crate keeps of a device's attributes.
pub(super) fn device_attr(name: String, attr: &sys::ibv_device_attr) -> DeviceAttr {
    DeviceAttr {
        name,
        guid: u64::from_be(attr.node_guid),
        ports: attr.phys_port_cnt,
        max_qp_wr: count(attr.max_qp_wr),
        max_sge: count(attr.max_sge),
        max_cqe: count(attr.max_cqe),
    }
}

/// A count verbs report as a C `int`, never negative.
pub(super) fn count(n: c_int) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

/// A port's attributes, with its GID at index 0.
pub(super) fn port_attr(attr: &sys::ibv_port_attr, gid: Gid) -> Result<PortAttr, VerbsError> {
    Ok(PortAttr {
        state: port_state(attr.state),
        link_layer: link_layer(attr.link_layer),
        lid: attr.lid,
        gid,
        active_mtu: mtu_from_raw(attr.active_mtu)
            .ok_or(VerbsError::Invalid("the port reports an unknown MTU"))?,
        max_msg_size: attr.max_msg_sz,
    })
}

/// A port's state. `Armed` (configured, not yet passing data) counts as
/// `Init`, and `ActiveDefer` (active, deferring some traffic) as `Active`;
/// `Nop` (no state reported) as `Down`.
pub(super) fn port_state(raw: sys::ibv_port_state::Type) -> PortState {
    use sys::ibv_port_state::*;
    match raw {
        IBV_PORT_INIT | IBV_PORT_ARMED => PortState::Init,
        IBV_PORT_ACTIVE | IBV_PORT_ACTIVE_DEFER => PortState::Active,
        _ => PortState::Down,
    }
}

/// A port's link layer. Drivers that leave it unspecified predate RoCE:
/// they are InfiniBand.
pub(super) fn link_layer(raw: u8) -> LinkLayer {
    if u32::from(raw) == sys::IBV_LINK_LAYER_ETHERNET {
        LinkLayer::Ethernet
    } else {
        LinkLayer::InfiniBand
    }
}

/// An MTU as verbs code it, if it is one of the five.
pub(super) fn mtu_from_raw(raw: sys::ibv_mtu) -> Option<Mtu> {
    Some(match raw {
        sys::IBV_MTU_256 => Mtu::M256,
        sys::IBV_MTU_512 => Mtu::M512,
        sys::IBV_MTU_1024 => Mtu::M1024,
        sys::IBV_MTU_2048 => Mtu::M2048,
        sys::IBV_MTU_4096 => Mtu::M4096,
        _ => return None,
    })
}

/// An MTU as verbs code it.
pub(super) fn mtu_to_raw(mtu: Mtu) -> sys::ibv_mtu {
    match mtu {
        Mtu::M256 => sys::IBV_MTU_256,
        Mtu::M512 => sys::IBV_MTU_512,
        Mtu::M1024 => sys::IBV_MTU_1024,
        Mtu::M2048 => sys::IBV_MTU_2048,
        Mtu::M4096 => sys::IBV_MTU_4096,
    }
}

/// A GID's 16 bytes.
pub(super) fn gid_from_raw(gid: &sys::ibv_gid) -> Gid {
    // SAFETY: both fields of the union are plain integers covering all 16
    // bytes, so every bit pattern is a valid `[u8; 16]`.
    Gid(unsafe { gid.raw })
}

/// A GID as verbs take it.
pub(super) fn gid_to_raw(gid: Gid) -> sys::ibv_gid {
    sys::ibv_gid { raw: gid.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mtu_goes_to_verbs_and_back() {
        for mtu in [Mtu::M256, Mtu::M512, Mtu::M1024, Mtu::M2048, Mtu::M4096] {
            assert_eq!(mtu_from_raw(mtu_to_raw(mtu)), Some(mtu));
        }
        assert_eq!(mtu_to_raw(Mtu::M256), 1);
        assert_eq!(mtu_to_raw(Mtu::M4096), 5);
        assert_eq!(mtu_from_raw(0), None);
        assert_eq!(mtu_from_raw(6), None);
    }

    #[test]
    fn port_states_and_link_layers_map_as_documented() {
        use sys::ibv_port_state::*;
        assert_eq!(port_state(IBV_PORT_NOP), PortState::Down);
        assert_eq!(port_state(IBV_PORT_DOWN), PortState::Down);
        assert_eq!(port_state(IBV_PORT_INIT), PortState::Init);
        assert_eq!(port_state(IBV_PORT_ARMED), PortState::Init);
        assert_eq!(port_state(IBV_PORT_ACTIVE), PortState::Active);
        assert_eq!(port_state(IBV_PORT_ACTIVE_DEFER), PortState::Active);
        assert_eq!(link_layer(0), LinkLayer::InfiniBand);
        assert_eq!(link_layer(1), LinkLayer::InfiniBand);
        assert_eq!(link_layer(2), LinkLayer::Ethernet);
    }

    #[test]
    fn a_port_converts_with_its_gid() {
        let mut raw = sys::ibv_port_attr {
            state: sys::ibv_port_state::IBV_PORT_ACTIVE,
            active_mtu: sys::IBV_MTU_1024,
            link_layer: sys::IBV_LINK_LAYER_ETHERNET as u8,
            lid: 0,
            max_msg_sz: 1 << 30,
            ..Default::default()
        };
        let mut gid = [0u8; 16];
        gid[10..].copy_from_slice(&[0xff, 0xff, 10, 0, 0, 1]);
        let port = port_attr(&raw, Gid(gid)).expect("a known MTU");
        assert_eq!(
            port,
            PortAttr {
                state: PortState::Active,
                link_layer: LinkLayer::Ethernet,
                lid: 0,
                gid: Gid(gid),
                active_mtu: Mtu::M1024,
                max_msg_size: 1 << 30,
            }
        );
        raw.active_mtu = 0;
        assert!(port_attr(&raw, Gid(gid)).is_err());
    }

    #[test]
    fn device_attributes_read_the_guid_in_network_order() {
        let raw = sys::ibv_device_attr {
            node_guid: 0x0002_c903_0000_0001u64.to_be(),
            phys_port_cnt: 2,
            max_qp_wr: 32_768,
            max_sge: 30,
            max_cqe: 4_194_303,
            ..Default::default()
        };
        let attr = device_attr("mlx5_0".to_owned(), &raw);
        assert_eq!(
            attr,
            DeviceAttr {
                name: "mlx5_0".to_owned(),
                guid: 0x0002_c903_0000_0001,
                ports: 2,
                max_qp_wr: 32_768,
                max_sge: 30,
                max_cqe: 4_194_303,
            }
        );
        assert_eq!(count(-1), 0);
    }

    #[test]
    fn gids_keep_their_bytes() {
        let gid = Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 0, 0, 1]);
        assert_eq!(gid_from_raw(&gid_to_raw(gid)), gid);
    }
}
