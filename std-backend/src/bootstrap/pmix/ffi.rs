//! The few PMIx client calls btl makes, declared by hand against PMIx 4's
//! ABI (`pmix.h`, `pmix_common.h`), and safe functions over them. The
//! crate's `build.rs` compiles `layout.c`, which checks every size, offset
//! and constant written here against the installed headers, so a PMIx
//! whose layout differs fails the build, not a job.
//!
//! | type            | size | fields (offset)                              |
//! |-----------------|-----:|----------------------------------------------|
//! | `pmix_proc_t`   |  260 | `nspace` char[256] (0), `rank` u32 (256)     |
//! | `pmix_value_t`  |   32 | `type` u16 (0), `data` union (8)             |
//! | `pmix_info_t`   |  552 | `key` char[512] (0), `flags` u32 (512), `value` (520) |

use std::ffi::{CStr, c_char, c_int};

/// A PMIx status code: 0 is success, negative values are errors.
pub(super) type Status = c_int;

/// `PMIX_SUCCESS`.
pub(super) const SUCCESS: Status = 0;
/// `PMIX_ERR_UNREACH`: no PMIx server to talk to (not started by a launcher).
pub(super) const ERR_UNREACH: Status = -25;
/// `PMIX_ERR_TIMEOUT`.
pub(super) const ERR_TIMEOUT: Status = -24;
/// `PMIX_ERR_NOT_FOUND`.
pub(super) const ERR_NOT_FOUND: Status = -46;

/// `PMIX_BOOL`.
pub(super) const TYPE_BOOL: u16 = 1;
/// `PMIX_STRING`.
pub(super) const TYPE_STRING: u16 = 3;
/// `PMIX_INT`.
pub(super) const TYPE_INT: u16 = 6;
/// `PMIX_UINT32`.
pub(super) const TYPE_UINT32: u16 = 14;

/// `PMIX_LOCAL`: only processes on the same node see the value.
pub(super) const SCOPE_LOCAL: u8 = 1;
/// `PMIX_GLOBAL`: every process of the job sees the value.
pub(super) const SCOPE_GLOBAL: u8 = 3;

/// `PMIX_RANK_WILDCARD`: the job as a whole, for job-level keys.
pub(super) const RANK_WILDCARD: u32 = u32::MAX - 1;

/// `PMIX_JOB_SIZE` (u32): processes in the job.
pub(super) const KEY_JOB_SIZE: &CStr = c"pmix.job.size";
/// `PMIX_LOCAL_PEERS` (string): the job's ranks on this node, comma-separated.
pub(super) const KEY_LOCAL_PEERS: &CStr = c"pmix.lpeers";
/// `PMIX_COLLECT_DATA` (bool): a fence that gathers every committed value.
pub(super) const KEY_COLLECT_DATA: &CStr = c"pmix.collect";
/// `PMIX_TIMEOUT` (int, seconds): how long a blocking call may wait.
pub(super) const KEY_TIMEOUT: &CStr = c"pmix.timeout";

/// Longest namespace, without its terminating NUL.
pub(super) const MAX_NSLEN: usize = 255;
/// Longest key, without its terminating NUL.
pub(super) const MAX_KEYLEN: usize = 511;

/// `pmix_proc_t`: a process as PMIx names it.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct Proc {
    /// The job's namespace, NUL-terminated.
    pub(super) nspace: [c_char; MAX_NSLEN + 1],
    /// The rank within it.
    pub(super) rank: u32,
}

/// `pmix_value_t`: a type tag and a union as large as its largest member.
#[repr(C)]
#[derive(Clone, Copy)]
struct Value {
    /// Which member of `data` holds the value (`TYPE_*`).
    kind: u16,
    /// The union, read through the accessors of the types btl uses.
    data: [u64; 3],
}

/// `pmix_info_t`: a key and its value, passed as directives.
#[repr(C)]
#[derive(Clone, Copy)]
struct Info {
    /// The key, NUL-terminated.
    key: [c_char; MAX_KEYLEN + 1],
    /// Directive flags (none used).
    flags: u32,
    /// The value.
    value: Value,
}

const _: () = {
    assert!(std::mem::size_of::<Proc>() == 260);
    assert!(std::mem::offset_of!(Proc, rank) == 256);
    assert!(std::mem::size_of::<Value>() == 32);
    assert!(std::mem::offset_of!(Value, data) == 8);
    assert!(std::mem::size_of::<Info>() == 552);
    assert!(std::mem::offset_of!(Info, flags) == 512);
    assert!(std::mem::offset_of!(Info, value) == 520);
};

impl Proc {
    /// A blank name, for `PMIx_Init` to fill in.
    fn blank() -> Self {
        Proc {
            nspace: [0; MAX_NSLEN + 1],
            rank: u32::MAX,
        }
    }
}

impl Value {
    /// A value whose union is zero, of type `kind`.
    fn of(kind: u16) -> Self {
        Value { kind, data: [0; 3] }
    }

    /// A string value pointing at `text`, which must outlive every use
    /// of the value (PMIx copies it in `PMIx_Put`).
    fn string(text: &CStr) -> Self {
        let mut v = Value::of(TYPE_STRING);
        v.data[0] = text.as_ptr() as usize as u64;
        v
    }

    /// A boolean value.
    fn boolean(flag: bool) -> Self {
        let mut v = Value::of(TYPE_BOOL);
        v.data[0] = u64::from(flag);
        v
    }

    /// An `int` value (little-endian: the low bytes of the union).
    fn int(n: c_int) -> Self {
        let mut v = Value::of(TYPE_INT);
        v.data[0] = u64::from(n.cast_unsigned());
        v
    }

    /// The value as a `u32`, if it is one.
    fn as_u32(&self) -> Option<u32> {
        (self.kind == TYPE_UINT32).then_some(self.data[0] as u32)
    }

    /// The string the value points at, if it is one.
    fn string_ptr(&self) -> Option<*const c_char> {
        (self.kind == TYPE_STRING && self.data[0] != 0)
            .then_some(self.data[0] as usize as *const c_char)
    }
}

impl Info {
    /// Directive `key` set to `value`.
    fn new(key: &CStr, value: Value) -> Self {
        let mut info = Info {
            key: [0; MAX_KEYLEN + 1],
            flags: 0,
            value,
        };
        for (to, &from) in info
            .key
            .iter_mut()
            .zip(key.to_bytes().iter().take(MAX_KEYLEN))
        {
            *to = from.cast_signed();
        }
        info
    }
}

#[link(name = "pmix")]
unsafe extern "C" {
    /// Connects to the local PMIx server and names this process.
    fn PMIx_Init(proc: *mut Proc, info: *mut Info, ninfo: usize) -> Status;
    /// Closes the connection `PMIx_Init` opened (reference-counted).
    fn PMIx_Finalize(info: *const Info, ninfo: usize) -> Status;
    /// Stores `key` with the value for the given scope, to be committed.
    fn PMIx_Put(scope: u8, key: *const c_char, value: *mut Value) -> Status;
    /// Sends the values put so far to the local server.
    fn PMIx_Commit() -> Status;
    /// A barrier across `procs` (null: the whole job), collecting the
    /// committed values when asked to.
    fn PMIx_Fence(procs: *const Proc, nprocs: usize, info: *const Info, ninfo: usize) -> Status;
    /// The value of `key` published by `proc`, allocated by PMIx.
    fn PMIx_Get(
        proc: *const Proc,
        key: *const c_char,
        info: *const Info,
        ninfo: usize,
        value: *mut *mut Value,
    ) -> Status;
    /// Frees what a value returned by `PMIx_Get` points to (not the value).
    fn PMIx_Value_destruct(value: *mut Value);
    /// A description of `status`, owned by PMIx.
    fn PMIx_Error_string(status: Status) -> *const c_char;
}

/// What `PMIx_Get` returned, copied out of PMIx's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Got {
    /// A `u32`.
    U32(u32),
    /// A string.
    Text(String),
    /// A value of another type (its `PMIX_*` type number).
    Other(u16),
}

/// `status` as a result.
fn check(status: Status) -> Result<(), Status> {
    if status == SUCCESS {
        Ok(())
    } else {
        Err(status)
    }
}

/// Connects to the launcher's PMIx server: this process's name, or why
/// not ([`ERR_UNREACH`]: no server, the process runs alone).
pub(super) fn init() -> Result<Proc, Status> {
    let mut me = Proc::blank();
    // SAFETY: `me` is a valid, writable `pmix_proc_t` (layout checked by
    // `layout.c`); no directives are passed (null, 0).
    check(unsafe { PMIx_Init(&mut me, std::ptr::null_mut(), 0) })?;
    Ok(me)
}

/// Closes what [`init`] opened.
pub(super) fn finalize() -> Result<(), Status> {
    // SAFETY: no directives (null, 0); PMIx counts inits and finalizes.
    check(unsafe { PMIx_Finalize(std::ptr::null(), 0) })
}

/// Puts string `text` under `key` for `scope` (to be committed).
pub(super) fn put(scope: u8, key: &CStr, text: &CStr) -> Result<(), Status> {
    let mut value = Value::string(text);
    // SAFETY: `key` and `text` are NUL-terminated and live across the
    // call; PMIx copies the value before it returns.
    check(unsafe { PMIx_Put(scope, key.as_ptr(), &mut value) })
}

/// Sends what was put to the local server.
pub(super) fn commit() -> Result<(), Status> {
    // SAFETY: no arguments.
    check(unsafe { PMIx_Commit() })
}

/// A barrier across the whole job, gathering every committed value when
/// `collect`, giving up after `timeout` seconds.
pub(super) fn fence(collect: bool, timeout: c_int) -> Result<(), Status> {
    let info = [
        Info::new(KEY_COLLECT_DATA, Value::boolean(collect)),
        Info::new(KEY_TIMEOUT, Value::int(timeout)),
    ];
    // SAFETY: null procs with 0 mean the caller's whole namespace; `info`
    // is an array of 2 valid `pmix_info_t` that lives across the call.
    check(unsafe { PMIx_Fence(std::ptr::null(), 0, info.as_ptr(), info.len()) })
}

/// The value `proc` put under `key`, waiting up to `timeout` seconds for
/// it to be committed.
pub(super) fn get(proc: &Proc, key: &CStr, timeout: c_int) -> Result<Got, Status> {
    let info = [Info::new(KEY_TIMEOUT, Value::int(timeout))];
    let mut value: *mut Value = std::ptr::null_mut();
    // SAFETY: `proc`, `key` and `info` are valid for the call; PMIx
    // stores a pointer to a value it allocated in `value`.
    check(unsafe { PMIx_Get(proc, key.as_ptr(), info.as_ptr(), info.len(), &mut value) })?;
    if value.is_null() {
        return Err(ERR_NOT_FOUND);
    }
    // SAFETY: on success `value` points to a valid `pmix_value_t` that
    // this function now owns; a string member is NUL-terminated.
    let got = unsafe {
        let v = &*value;
        match (v.as_u32(), v.string_ptr()) {
            (Some(n), _) => Got::U32(n),
            (None, Some(text)) => Got::Text(CStr::from_ptr(text).to_string_lossy().into_owned()),
            (None, None) => Got::Other(v.kind),
        }
    };
    // SAFETY: `value` came from `PMIx_Get` (malloc'ed by PMIx): its
    // members are freed by `PMIx_Value_destruct`, the value by `free`,
    // as PMIx's `PMIX_VALUE_RELEASE` does. Nothing borrows it any more.
    unsafe {
        PMIx_Value_destruct(value);
        libc::free(value.cast());
    }
    Ok(got)
}

/// PMIx's description of `status`.
pub(super) fn describe(status: Status) -> String {
    // SAFETY: PMIx returns a static NUL-terminated string for any status.
    let text = unsafe { PMIx_Error_string(status) };
    if text.is_null() {
        return format!("PMIx status {status}");
    }
    // SAFETY: non-null, NUL-terminated, static (see above).
    let text = unsafe { CStr::from_ptr(text) };
    format!("{} ({status})", text.to_string_lossy())
}
