//! Lua 5.1 as Redis embeds it: the `redis` table (`call`, `pcall`,
//! `error_reply`, `status_reply`, ...), KEYS and ARGV, read-only globals,
//! and the conversions between Redis replies and Lua values.
//!
//! Scripts see replies as a RESP2 client does (Redis's default for scripts;
//! `redis.setresp(3)` is not modelled): integer → number, bulk → string,
//! nil → false, array → table, status → `{ok=..}`, error → raised by
//! `redis.call`, `{err=..}` from `redis.pcall`. A number passed to
//! `redis.call` becomes `%.17g` text (an integer below 1e17 prints as one).
//! A script's value goes back to the client as Redis converts it: number →
//! integer (truncated), string → bulk, table → `{err=}` error, `{ok=}`
//! status, else an array up to its first nil; false → nil, true → 1.

use std::fmt;

use mlua::{Lua, LuaOptions, MultiValue, StdLib, Table, Value as LuaValue};

use super::reply::{Reply, fmt_g17};
use super::{Core, Flavor};

/// The error a failed `redis.call` raises: the command's error reply, which
/// becomes the script's reply if nothing catches it.
#[derive(Debug)]
pub(super) struct CallError(pub(super) String);

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CallError {}

/// The version a Redis 7 flavour tells scripts (`redis.REDIS_VERSION`).
pub(super) const REDIS7_VERSION: &str = "7.0.15";
/// What a Redis 6.2 flavour tells INFO.
pub(super) const REDIS62_VERSION: &str = "6.2.14";

/// A Lua state set up as Redis sets up its scripting engine. The caller
/// puts a [`Core`] in its app data: `redis.call` runs commands on it.
pub(super) fn new_state(flavor: Flavor) -> Lua {
    // The libraries Redis loads that scripts may use (no io, os, package).
    let lua = Lua::new_with(
        StdLib::STRING | StdLib::TABLE | StdLib::MATH,
        LuaOptions::new(),
    )
    .expect("Lua starts");
    setup(&lua, flavor).expect("the redis table is built");
    // A script's garbage is small and short-lived: collect when the heap
    // has grown fourfold rather than twofold (Lua's default), which halves
    // the collector's work. Replies and keyspace do not depend on it.
    lua.gc_set_pause(400);
    lua
}

fn setup(lua: &Lua, flavor: Flavor) -> mlua::Result<()> {
    let redis = lua.create_table()?;
    redis.set(
        "call",
        lua.create_function(|lua, args: MultiValue| redis_call(lua, args, true))?,
    )?;
    redis.set(
        "pcall",
        lua.create_function(|lua, args: MultiValue| redis_call(lua, args, false))?,
    )?;
    redis.set(
        "error_reply",
        lua.create_function(|lua, msg: mlua::String| {
            let t = lua.create_table()?;
            // 7.0 strips a leading '-' (and 6.2 keeps it off the wire too).
            let bytes = msg.as_bytes();
            let text = bytes.strip_prefix(b"-").unwrap_or(&bytes);
            t.raw_set("err", lua.create_string(text)?)?;
            Ok(t)
        })?,
    )?;
    redis.set(
        "status_reply",
        lua.create_function(|lua, msg: mlua::String| {
            let t = lua.create_table()?;
            t.raw_set("ok", msg)?;
            Ok(t)
        })?,
    )?;
    redis.set(
        "setresp",
        lua.create_function(|_, version: i64| {
            assert!(
                version == 2,
                "sim server: unmodelled redis.setresp({version})"
            );
            Ok(())
        })?,
    )?;
    redis.set("log", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
    for (i, level) in ["LOG_DEBUG", "LOG_VERBOSE", "LOG_NOTICE", "LOG_WARNING"]
        .iter()
        .enumerate()
    {
        redis.set(*level, i)?;
    }
    if flavor == Flavor::Redis7 {
        redis.set("REDIS_VERSION", REDIS7_VERSION)?;
        redis.set("REDIS_VERSION_NUM", 0x0007_000f)?;
        // Every user may run every command here (no ACLs are modelled).
        redis.set(
            "acl_check_cmd",
            lua.create_function(|_, _: MultiValue| Ok(true))?,
        )?;
    }
    lua.globals().raw_set("redis", redis)?;
    // Redis makes the globals read-only and refuses reads of unset ones.
    lua.load(
        r#"
        setmetatable(_G, {
          __newindex = function() error('Attempt to modify a readonly table', 2) end,
          __index = function(_, k)
            error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
          end,
        })
        "#,
    )
    .set_name("=setup")
    .exec()
}

/// `redis.call` (raise: true) and `redis.pcall`.
fn redis_call(lua: &Lua, args: MultiValue, raise: bool) -> mlua::Result<LuaValue> {
    let reply = match command_args(args, lua) {
        Ok(argv) => {
            let mut core = lua
                .app_data_mut::<Core>()
                .expect("a script runs with its server");
            core.script_command(&argv)
        }
        Err(reply) => reply,
    };
    match reply {
        Reply::Error(text) if raise => Err(mlua::Error::external(CallError(text))),
        reply => to_lua(lua, reply),
    }
}

/// The arguments of a `redis.call` as Redis reads them.
fn command_args(args: MultiValue, lua: &Lua) -> Result<Vec<Vec<u8>>, Reply> {
    if args.is_empty() {
        return Err(Reply::err(
            "ERR Please specify at least one argument for this redis lib call",
        ));
    }
    let flavor = lua
        .app_data_ref::<Core>()
        .expect("a script runs with its server")
        .flavor;
    args.into_iter()
        .map(|arg| match arg {
            LuaValue::String(s) => Ok(s.as_bytes().to_vec()),
            LuaValue::Integer(i) => Ok(i.to_string().into_bytes()),
            LuaValue::Number(n) => Ok(fmt_g17(n).into_bytes()),
            _ => Err(Reply::err(match flavor {
                Flavor::Redis7 => "ERR Lua redis lib command arguments must be strings or integers",
                Flavor::Redis62 => "ERR Lua redis() command arguments must be strings or integers",
            })),
        })
        .collect()
}

/// A reply as a script sees it (RESP2 conversions).
fn to_lua(lua: &Lua, reply: Reply) -> mlua::Result<LuaValue> {
    Ok(match reply {
        Reply::Status(s) => {
            let t = lua.create_table_with_capacity(0, 1)?;
            t.raw_set("ok", s)?;
            LuaValue::Table(t)
        }
        Reply::Error(e) => {
            let t = lua.create_table_with_capacity(0, 1)?;
            t.raw_set("err", e)?;
            LuaValue::Table(t)
        }
        Reply::Int(i) => LuaValue::Number(i as f64),
        Reply::Bulk(b) => LuaValue::String(lua.create_string(b)?),
        Reply::Verbatim(s) => LuaValue::String(lua.create_string(s)?),
        Reply::Double(d) => LuaValue::String(lua.create_string(fmt_g17(d))?),
        Reply::Nil => LuaValue::Boolean(false),
        Reply::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            LuaValue::Table(t)
        }
        Reply::Map(pairs) => {
            let t = lua.create_table_with_capacity(pairs.len() * 2, 0)?;
            for (i, (k, v)) in pairs.into_iter().enumerate() {
                t.raw_set(2 * i + 1, to_lua(lua, k)?)?;
                t.raw_set(2 * i + 2, to_lua(lua, v)?)?;
            }
            LuaValue::Table(t)
        }
        Reply::Push(..) => unreachable!("no command a script may run answers a push"),
    })
}

/// A script's value as the client's reply.
pub(super) fn from_lua(value: &LuaValue) -> Reply {
    match value {
        LuaValue::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        LuaValue::Boolean(true) => Reply::Int(1),
        LuaValue::Boolean(false) => Reply::Nil,
        // C's (long long) cast: toward zero.
        LuaValue::Number(n) => Reply::Int(*n as i64),
        LuaValue::Integer(i) => Reply::Int(*i),
        LuaValue::Table(t) => table_reply(t),
        _ => Reply::Nil,
    }
}

fn table_reply(t: &Table) -> Reply {
    if let Ok(LuaValue::String(e)) = t.raw_get::<LuaValue>("err") {
        return Reply::Error(e.to_string_lossy());
    }
    if let Ok(LuaValue::String(s)) = t.raw_get::<LuaValue>("ok") {
        return Reply::Status(s.to_string_lossy());
    }
    let mut items = vec![];
    for i in 1.. {
        match t.raw_get::<LuaValue>(i) {
            Ok(LuaValue::Nil) | Err(_) => break,
            Ok(v) => items.push(from_lua(&v)),
        }
    }
    Reply::Array(items)
}

/// Sets KEYS and ARGV for the next script.
pub(super) fn set_keys_argv(lua: &Lua, keys: &[Vec<u8>], argv: &[Vec<u8>]) -> mlua::Result<()> {
    let globals = lua.globals();
    for (name, items) in [("KEYS", keys), ("ARGV", argv)] {
        // Text goes onto the Lua stack as it is, in one call for the whole
        // table; a string value would take a registry reference each (a
        // fifth of the simulator's time).
        let t = match items
            .iter()
            .map(|item| std::str::from_utf8(item))
            .collect::<Result<Vec<&str>, _>>()
        {
            Ok(texts) => lua.create_sequence_from(texts)?,
            Err(_) => {
                let t = lua.create_table_with_capacity(items.len(), 0)?;
                for (i, item) in items.iter().enumerate() {
                    t.raw_set(i + 1, lua.create_string(item)?)?;
                }
                t
            }
        };
        globals.raw_set(name, t)?;
    }
    Ok(())
}

/// The command error a failed `redis.call` raised, if that is what ended
/// the script.
pub(super) fn call_error(e: &mlua::Error) -> Option<&str> {
    match e {
        mlua::Error::CallbackError { cause, .. } => call_error(cause),
        mlua::Error::WithContext { cause, .. } => call_error(cause),
        mlua::Error::ExternalError(inner) => {
            inner.downcast_ref::<CallError>().map(|c| c.0.as_str())
        }
        _ => None,
    }
}

/// A Lua error's message without the traceback mlua adds.
pub(super) fn lua_message(e: &mlua::Error) -> String {
    let text = match e {
        mlua::Error::RuntimeError(m) | mlua::Error::SyntaxError { message: m, .. } => m.clone(),
        mlua::Error::CallbackError { cause, .. } => return lua_message(cause),
        other => other.to_string(),
    };
    match text.find("\nstack traceback:") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}
