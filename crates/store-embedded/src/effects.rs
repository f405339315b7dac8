//! The effects of a write: every change the writer makes to an item, index, TTL or token
//! table, recorded as it is made so that the journal can replay it.
//!
//! [`Tx`] wraps the group's redb write transaction; its [`Tx::put`] and [`Tx::remove`] apply a
//! change and append it to the group's effects — "put these bytes at this key of this redb
//! table", "remove this key" — which `crate::journal` writes as one record. [`replay`] applies a
//! record's effects again after a crash. [`Open`] keeps the item, index and TTL tables a group
//! touches open until it commits.
//!
//! An effect is `op | table tag` (one byte), then, for a base or index table, its redb name,
//! then the key, then (for a put) the value, each preceded by its length (u32 LE).

use std::cell::RefCell;
use std::collections::HashMap;

use redb::WriteTransaction;

use crate::layout::{OpError, TOKEN_TIMES, TOKENS, TTL, bytes_table};

/// Which redb table an effect is on.
#[derive(Clone, Copy)]
pub enum On<'a> {
    /// A base or index table (`t/…`, `i/…`), by redb name.
    Items(&'a str),
    /// The TTL index.
    Ttl,
    /// Idempotency tokens.
    Tokens,
    /// Idempotency tokens by time.
    TokenTimes,
}

const PUT: u8 = 0x10;
const REMOVE: u8 = 0x20;

impl On<'_> {
    fn tag(self) -> u8 {
        match self {
            On::Items(_) => 0,
            On::Ttl => 1,
            On::Tokens => 2,
            On::TokenTimes => 3,
        }
    }
}

/// The item, index and TTL tables a write transaction has opened, kept open until the
/// transaction's group is done. Opening a redb table looks it up in redb's table tree and
/// closing it stages its new root there; a group writes the same few tables hundreds of times,
/// so it opens each once (a sixth of the writer's time went to opening and closing them).
///
/// redb refuses to open a table twice at once, so while a table is held here every access to
/// it must go through [`Open::items`] or [`Open::ttl`]; [`Open::close`] gives them all back
/// (before a table is deleted, say).
pub struct Open<'t> {
    txn: &'t WriteTransaction,
    items: RefCell<HashMap<String, ItemTable<'t>>>,
    ttl: RefCell<Option<TtlTable<'t>>>,
}

/// An open base or index table.
pub type ItemTable<'t> = redb::Table<'t, &'static [u8], &'static [u8]>;
/// The open TTL index.
pub type TtlTable<'t> = redb::Table<'t, &'static [u8], ()>;

impl<'t> Open<'t> {
    /// Nothing open yet.
    pub fn new(txn: &'t WriteTransaction) -> Open<'t> {
        Open { txn, items: RefCell::new(HashMap::new()), ttl: RefCell::new(None) }
    }

    /// Runs `f` on the base or index table with this redb name, opening it on first use.
    pub fn items<R>(&self, name: &str, f: impl FnOnce(&mut ItemTable<'t>) -> Result<R, OpError>) -> Result<R, OpError> {
        let mut items = self.items.try_borrow_mut().map_err(|_| reentered())?;
        let table = match items.get_mut(name) {
            Some(table) => table,
            None => {
                let table = self.txn.open_table(bytes_table(name))?;
                items.entry(name.to_string()).or_insert(table)
            }
        };
        f(table)
    }

    /// Runs `f` on the TTL index, opening it on first use.
    pub fn ttl<R>(&self, f: impl FnOnce(&mut TtlTable<'t>) -> Result<R, OpError>) -> Result<R, OpError> {
        let mut ttl = self.ttl.try_borrow_mut().map_err(|_| reentered())?;
        let table = match ttl.as_mut() {
            Some(table) => table,
            None => ttl.insert(self.txn.open_table(TTL)?),
        };
        f(table)
    }

    /// Closes every table held, so that they can be opened directly (or deleted).
    pub fn close(&self) -> Result<(), OpError> {
        self.items.try_borrow_mut().map_err(|_| reentered())?.clear();
        *self.ttl.try_borrow_mut().map_err(|_| reentered())? = None;
        Ok(())
    }
}

/// A table of [`Open`] was asked for while a closure was already using the tables: a bug in the
/// writer, reported as a failed group rather than a panic.
fn reentered() -> OpError {
    OpError::Fatal("a redb table was opened again while in use".into())
}

/// A redb write transaction that records every change it makes to item, index, TTL and token
/// tables as journal effects.
///
/// Invariant: every write the writer makes outside table creation and deletion goes through
/// [`Tx::put`] or [`Tx::remove`]; the crash tests would lose acknowledged writes otherwise.
/// Item, index and TTL tables are read through [`Tx::tables`] ([`Open`] says why); other
/// tables through [`Tx::txn`].
pub struct Tx<'t> {
    open: Open<'t>,
    effects: RefCell<Vec<u8>>,
}

fn push_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

impl<'t> Tx<'t> {
    /// Wraps a write transaction.
    pub fn new(txn: &'t WriteTransaction) -> Tx<'t> {
        Tx { open: Open::new(txn), effects: RefCell::new(Vec::new()) }
    }

    /// The effects recorded, closing every table (the transaction can then commit).
    pub fn into_effects(self) -> Vec<u8> {
        self.effects.into_inner()
    }

    /// The item, index and TTL tables, opened once per transaction.
    pub fn tables(&self) -> &Open<'t> {
        &self.open
    }

    /// The transaction itself, for tables [`Open`] does not hold (definitions, tokens, the
    /// applied sequence) and for creating tables.
    pub fn txn(&self) -> &'t WriteTransaction {
        self.open.txn
    }

    fn note(&self, op: u8, on: On<'_>, key: &[u8], value: Option<&[u8]>) {
        let mut out = self.effects.borrow_mut();
        out.push(op | on.tag());
        if let On::Items(name) = on {
            push_bytes(&mut out, name.as_bytes());
        }
        push_bytes(&mut out, key);
        if let Some(value) = value {
            push_bytes(&mut out, value);
        }
    }

    /// Inserts into an item or index table, returning the bytes it replaced if `want_old`.
    pub fn put(&self, on: On<'_>, key: &[u8], value: &[u8], want_old: bool) -> Result<Option<Vec<u8>>, OpError> {
        let old = put_raw(&self.open, on, key, value, want_old)?;
        self.note(PUT, on, key, Some(value));
        Ok(old)
    }

    /// Removes a key, returning the bytes it held if `want_old`.
    pub fn remove(&self, on: On<'_>, key: &[u8], want_old: bool) -> Result<Option<Vec<u8>>, OpError> {
        let old = remove_raw(&self.open, on, key, want_old)?;
        self.note(REMOVE, on, key, None);
        Ok(old)
    }
}

fn token(key: &[u8]) -> Result<&str, OpError> {
    std::str::from_utf8(key).map_err(|_| OpError::Fatal("journal: a token is not UTF-8".into()))
}

fn put_raw(open: &Open<'_>, on: On<'_>, key: &[u8], value: &[u8], want_old: bool) -> Result<Option<Vec<u8>>, OpError> {
    let txn = open.txn;
    Ok(match on {
        On::Items(name) => {
            open.items(name, |t| Ok(t.insert(key, value)?.filter(|_| want_old).map(|v| v.value().to_vec())))?
        }
        On::Ttl => {
            open.ttl(|t| Ok(t.insert(key, ()).map(drop)?))?;
            None
        }
        On::Tokens => {
            let mut t = txn.open_table(TOKENS)?;
            let old = t.insert(token(key)?, value)?;
            old.filter(|_| want_old).map(|v| v.value().to_vec())
        }
        On::TokenTimes => {
            txn.open_table(TOKEN_TIMES)?.insert(key, ())?;
            None
        }
    })
}

fn remove_raw(open: &Open<'_>, on: On<'_>, key: &[u8], want_old: bool) -> Result<Option<Vec<u8>>, OpError> {
    let txn = open.txn;
    Ok(match on {
        On::Items(name) => open.items(name, |t| Ok(t.remove(key)?.filter(|_| want_old).map(|v| v.value().to_vec())))?,
        On::Ttl => {
            open.ttl(|t| Ok(t.remove(key).map(drop)?))?;
            None
        }
        On::Tokens => {
            let mut t = txn.open_table(TOKENS)?;
            let old = t.remove(token(key)?)?;
            old.filter(|_| want_old).map(|v| v.value().to_vec())
        }
        On::TokenTimes => {
            txn.open_table(TOKEN_TIMES)?.remove(key)?;
            None
        }
    })
}

/// Applies one record's effects to the tables of `open`'s transaction.
pub fn replay(open: &Open<'_>, mut payload: &[u8]) -> Result<(), OpError> {
    fn take<'a>(rest: &mut &'a [u8]) -> Result<&'a [u8], OpError> {
        let corrupt = || OpError::Fatal("journal: a record's effects are cut short".into());
        let (len, tail) = rest.split_first_chunk::<4>().ok_or_else(corrupt)?;
        let len = u32::from_le_bytes(*len) as usize;
        let bytes = tail.get(..len).ok_or_else(corrupt)?;
        *rest = &tail[len..];
        Ok(bytes)
    }
    while let Some((&op, rest)) = payload.split_first() {
        payload = rest;
        let on = match op & 0x0F {
            0 => On::Items(
                std::str::from_utf8(take(&mut payload)?)
                    .map_err(|_| OpError::Fatal("journal: a table name is not UTF-8".into()))?,
            ),
            1 => On::Ttl,
            2 => On::Tokens,
            3 => On::TokenTimes,
            other => return Err(OpError::Fatal(format!("journal: unknown table tag {other}"))),
        };
        let key = take(&mut payload)?;
        match op & 0xF0 {
            PUT => {
                let value = take(&mut payload)?;
                put_raw(open, on, key, value, false)?;
            }
            REMOVE => {
                remove_raw(open, on, key, false)?;
            }
            other => return Err(OpError::Fatal(format!("journal: unknown effect {other:#x}"))),
        }
    }
    Ok(())
}

/// The effects of one removal of `key` from the TTL index: a record payload for the journal's
/// tests.
#[cfg(test)]
pub fn ttl_removal(key: &[u8]) -> Vec<u8> {
    let mut out = vec![REMOVE | On::Ttl.tag()];
    push_bytes(&mut out, key);
    out
}
