//! How an engine holds its state, chosen by the caller, as smoltcp's
//! `SocketSet` takes its sockets: every table is sized when the engine is
//! made and never grows, and the engine value itself is small.
//!
//! A [`Storage`] says how the tables are held: [`Lent`] borrows them (from
//! an [`Inline`](super::tables::Inline) struct sized by const generics, in
//! a `static` or on a stack, or from any slices), and a host can own them
//! (btl-std holds them in boxes). What the tables are is
//! [`tables`](super::tables).

use core::borrow::BorrowMut;
use core::marker::PhantomData;

use super::journal::Journal;
use crate::btl::RegSlot;
use crate::pool::{PoolCell, Region};

/// How an engine holds its tables, registered memory and pool region.
pub trait Storage {
    /// A table of `T`s: a lent slice, an array, a box.
    type Table<T: 'static>: BorrowMut<[T]>;
    /// Registered memory, as the engine keeps it until deregistration
    /// ([`Btl::Memory`](crate::btl::Btl::Memory)).
    type Memory: AsRef<[u8]> + AsMut<[u8]>;
    /// The slots of registered memory.
    type Registrations: BorrowMut<[RegSlot<Self::Memory>]>;
    /// The region the fragment pools are carved from.
    type Region: Region;
    /// Where the engine's calls are recorded
    /// ([`journal`](super::journal)): `()` for none.
    type Journal: Journal;
}

/// Storage lent for `'a`: every table a slice borrowed from the caller,
/// registered memory held as `M` (`&'a mut [u8]` by default).
#[derive(Debug)]
pub struct Lent<'a, M = &'a mut [u8]>(PhantomData<(&'a mut (), M)>);

impl<'a, M: AsRef<[u8]> + AsMut<[u8]> + 'a> Storage for Lent<'a, M> {
    type Table<T: 'static> = &'a mut [T];
    type Memory = M;
    type Registrations = &'a mut [RegSlot<M>];
    type Region = &'a [PoolCell];
    type Journal = ();
}
