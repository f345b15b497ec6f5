//! The [`Btl`](super::Btl) methods a driver passes through unchanged to
//! the BTL it runs, written once: a driver (btl-std's socket `Module`, its
//! shared-memory module) wraps the methods that join peers, hand over
//! memory, move the BTL and end it, and forwards the rest with
//! [`forward_btl_operations!`](crate::forward_btl_operations).

/// Inside an `impl Btl for Driver`, forwards every operation on peers
/// already joined (`attributes`, `attributes_for`, `pools`, `alloc`, `free`, `prepare_src`,
/// `prepare_src_registered`, `send`, `sendi`, `region`, `region_mut`,
/// `put`, `put_notify`, `get`, `poll_event`) to the BTL in field
/// `$inner`. The driver writes `add_procs`, `del_procs`, `register_mem`,
/// `deregister_mem`, `progress` and `finalize` itself, forwarding them
/// or doing its part around them.
#[macro_export]
macro_rules! forward_btl_operations {
    ($inner:ident) => {
        fn attributes(&self) -> &$crate::btl::Attributes {
            self.$inner.attributes()
        }

        fn attributes_for(
            &self,
            endpoint: $crate::endpoint::EndpointId,
        ) -> &$crate::btl::Attributes {
            self.$inner.attributes_for(endpoint)
        }

        fn pools(&self) -> $crate::pool::PoolsRef<'_> {
            self.$inner.pools()
        }

        fn alloc(
            &mut self,
            endpoint: $crate::endpoint::EndpointId,
            order: $crate::desc::Order,
            size: usize,
            flags: $crate::desc::DescFlags,
        ) -> Result<$crate::desc::Descriptor, $crate::btl::BtlError> {
            self.$inner.alloc(endpoint, order, size, flags)
        }

        fn free(&mut self, desc: $crate::desc::Descriptor) -> Result<(), $crate::btl::BtlError> {
            self.$inner.free(desc)
        }

        fn prepare_src(
            &mut self,
            endpoint: $crate::endpoint::EndpointId,
            data: &[u8],
            reserve: usize,
            order: $crate::desc::Order,
            flags: $crate::desc::DescFlags,
        ) -> Result<$crate::desc::Descriptor, $crate::btl::BtlError> {
            self.$inner
                .prepare_src(endpoint, data, reserve, order, flags)
        }

        fn prepare_src_registered(
            &mut self,
            endpoint: $crate::endpoint::EndpointId,
            data: $crate::btl::MemSlice,
            reserve: usize,
            order: $crate::desc::Order,
            flags: $crate::desc::DescFlags,
        ) -> Result<$crate::desc::Descriptor, $crate::btl::BtlError> {
            self.$inner
                .prepare_src_registered(endpoint, data, reserve, order, flags)
        }

        fn send(
            &mut self,
            endpoint: $crate::endpoint::EndpointId,
            desc: $crate::desc::Descriptor,
            tag: $crate::btl::Tag,
        ) -> Result<$crate::btl::SendStatus, $crate::btl::SendError> {
            self.$inner.send(endpoint, desc, tag)
        }

        fn sendi(
            &mut self,
            endpoint: $crate::endpoint::EndpointId,
            header: &[u8],
            payload: &[u8],
            tag: $crate::btl::Tag,
            order: $crate::desc::Order,
            flags: $crate::desc::DescFlags,
        ) -> Result<(), $crate::btl::BtlError> {
            self.$inner
                .sendi(endpoint, header, payload, tag, order, flags)
        }

        fn region(&self, handle: $crate::btl::MemHandle) -> Result<&[u8], $crate::btl::BtlError> {
            self.$inner.region(handle)
        }

        fn region_mut(
            &mut self,
            handle: $crate::btl::MemHandle,
        ) -> Result<&mut [u8], $crate::btl::BtlError> {
            self.$inner.region_mut(handle)
        }

        fn put(
            &mut self,
            endpoint: $crate::endpoint::EndpointId,
            local: $crate::btl::MemSlice,
            remote: $crate::btl::RemoteSlice,
            ctx: u64,
        ) -> Result<$crate::btl::OpId, $crate::btl::BtlError> {
            self.$inner.put(endpoint, local, remote, ctx)
        }

        fn put_notify(
            &mut self,
            endpoint: $crate::endpoint::EndpointId,
            local: $crate::btl::MemSlice,
            remote: $crate::btl::RemoteSlice,
            imm: u64,
            ctx: u64,
        ) -> Result<$crate::btl::OpId, $crate::btl::BtlError> {
            self.$inner.put_notify(endpoint, local, remote, imm, ctx)
        }

        fn get(
            &mut self,
            endpoint: $crate::endpoint::EndpointId,
            local: $crate::btl::MemSlice,
            remote: $crate::btl::RemoteSlice,
            ctx: u64,
        ) -> Result<$crate::btl::OpId, $crate::btl::BtlError> {
            self.$inner.get(endpoint, local, remote, ctx)
        }

        fn poll_event(&mut self) -> Option<$crate::btl::Event<'_>> {
            self.$inner.poll_event()
        }
    };
}
