//! A simulated Redis server: what the library and its scripts use, and
//! nothing else (an unmodelled command panics, naming it).
//!
//! Time is given by the caller with every command (the server's own clock,
//! in µs since the Unix epoch, which a fault may step); keys expire on it.
//! Scripts are the shipped `.lua` files, run unchanged in Lua 5.1.

mod db;
mod lua;
mod pubsub;
mod reply;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

use redis::Value;

use db::{Db, Resp};
use pubsub::PubSub;
pub use reply::error_value;
use reply::{NOT_INTEGER, Reply, parse_i64};

/// Which server the simulator plays: what scripts see of the version
/// (`redis.REDIS_VERSION`, 7.0's commands) and what INFO says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// Redis 7.0 (and Valkey 8, which answers the library's commands alike).
    Redis7,
    /// Redis 6.2: no `redis.REDIS_VERSION`, no SET .. NX .. GET, no PEXPIRE .. GT.
    Redis62,
}

/// A message a PUBLISH (or SPUBLISH) delivered to a subscribed connection.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// The connection subscribed to the channel.
    pub conn: u64,
    /// The push frame as redis-rs gives it (`PushKind::Message` or `SMessage`).
    pub push: redis::PushInfo,
}

/// What commands run on: the keyspace, subscriptions and the messages
/// published, at the time of the command being run. It lives in the Lua
/// state's app data, where `redis.call` finds it.
struct Core {
    flavor: Flavor,
    db: Db,
    pubsub: PubSub,
    deliveries: Vec<Delivery>,
    now_us: u64,
}

impl Core {
    fn now_ms(&self) -> i64 {
        (self.now_us / 1000) as i64
    }

    /// A command sent by a script (`redis.call`): RESP2 replies.
    fn script_command(&mut self, args: &[Vec<u8>]) -> Reply {
        let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
        match name.as_str() {
            "EVAL" | "EVALSHA" | "SCRIPT" | "SUBSCRIBE" | "UNSUBSCRIBE" | "SSUBSCRIBE"
            | "SUNSUBSCRIBE" | "PSUBSCRIBE" | "PUNSUBSCRIBE" | "WAIT" => {
                Reply::err("ERR This Redis command is not allowed from script")
            }
            _ => self.command(&name, args, Resp::Two),
        }
    }

    /// A command any caller may send; panics on one not modelled.
    fn command(&mut self, name: &str, args: &[Vec<u8>], resp: Resp) -> Reply {
        let (now, now_us, flavor) = (self.now_ms(), self.now_us, self.flavor);
        if let Some(reply) = self.db.command(flavor, now, now_us, name, args, resp) {
            return reply;
        }
        match name {
            "PUBLISH" | "SPUBLISH" => {
                if name == "SPUBLISH" && flavor == Flavor::Redis62 {
                    return unknown_command(args);
                }
                if args.len() != 3 {
                    return wrong_args(name);
                }
                let sharded = name == "SPUBLISH";
                let n = self
                    .pubsub
                    .publish(sharded, &args[1], &args[2], &mut self.deliveries);
                Reply::Int(n as i64)
            }
            "PING" => match args.len() {
                1 => Reply::Status("PONG".to_owned()),
                2 => Reply::Bulk(args[1].clone()),
                _ => wrong_args(name),
            },
            "INFO" => Reply::Verbatim(info(flavor)),
            _ => panic!("sim server: unmodelled command {name}"),
        }
    }
}

fn wrong_args(name: &str) -> Reply {
    Reply::err(format!(
        "ERR wrong number of arguments for '{}' command",
        name.to_ascii_lowercase()
    ))
}

/// A command this flavour lacks (SPUBLISH on 6.2), as Redis refuses it.
fn unknown_command(args: &[Vec<u8>]) -> Reply {
    Reply::err(format!(
        "ERR unknown command '{}', with args beginning with: ",
        String::from_utf8_lossy(&args[0])
    ))
}

/// INFO's text: the fields the library reads (the server's version, the
/// eviction policy) and a few more, in Redis's layout.
fn info(flavor: Flavor) -> String {
    let version = match flavor {
        Flavor::Redis7 => lua::REDIS7_VERSION,
        Flavor::Redis62 => lua::REDIS62_VERSION,
    };
    format!(
        "# Server\r\nredis_version:{version}\r\nredis_mode:standalone\r\n\
         \r\n# Replication\r\nrole:master\r\nconnected_slaves:0\r\n\
         \r\n# Memory\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\n"
    )
}

thread_local! {
    /// Bytecode of the scripts compiled on this thread, by SHA1.
    static COMPILED: std::cell::RefCell<HashMap<String, Vec<u8>>> =
        std::cell::RefCell::new(HashMap::new());
}

fn compiled(sha: &str) -> Option<Vec<u8>> {
    COMPILED.with(|c| c.borrow().get(sha).cloned())
}

fn remember_compiled(sha: &str, bytecode: Vec<u8>) {
    COMPILED.with(|c| c.borrow_mut().insert(sha.to_owned(), bytecode));
}

/// One server's data and scripts.
pub struct Server {
    flavor: Flavor,
    /// The scripting engine; its app data holds the [`Core`].
    lua: mlua::Lua,
    /// Compiled scripts by SHA1 (lower-case hex): each is compiled once.
    scripts: HashMap<String, mlua::Function>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("flavor", &self.flavor)
            .field("scripts", &self.scripts.len())
            .finish_non_exhaustive()
    }
}

impl Server {
    /// An empty server of `flavor`.
    pub fn new(flavor: Flavor) -> Server {
        Server::with_db(flavor, Db::default())
    }

    fn with_db(flavor: Flavor, db: Db) -> Server {
        let lua = lua::new_state(flavor);
        lua.set_app_data(Core {
            flavor,
            db,
            pubsub: PubSub::default(),
            deliveries: vec![],
            now_us: 0,
        });
        Server {
            flavor,
            lua,
            scripts: HashMap::new(),
        }
    }

    /// Which server this one plays.
    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    fn core(&self) -> mlua::AppDataRefMut<'_, Core> {
        self.lua
            .app_data_mut::<Core>()
            .expect("the server's core lives in its Lua state")
    }

    /// Runs one command sent by connection `conn` at server time `now_us`;
    /// the reply as a RESP3 client (redis-rs) receives it, errors as
    /// `Value::ServerError`. Messages it published are taken with
    /// [`Server::take_deliveries`].
    ///
    /// SUBSCRIBE and its kin answer one push frame per channel, as Redis
    /// does: the frame itself (`Value::Push`) for one channel, else a
    /// `Value::Array` of them in order.
    ///
    /// # Panics
    ///
    /// On a command (or a form of one) that is not modelled, naming it;
    /// never a silent wrong answer.
    pub fn exec(&mut self, conn: u64, now_us: u64, args: &[Vec<u8>]) -> Value {
        assert!(!args.is_empty(), "sim server: an empty command");
        self.core().now_us = now_us;
        let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
        let reply = match name.as_str() {
            "EVAL" | "EVALSHA" => self.eval(&name, args),
            "SCRIPT" => self.script(args),
            "SUBSCRIBE" | "UNSUBSCRIBE" | "SSUBSCRIBE" | "SUNSUBSCRIBE" => {
                let mut core = self.core();
                if matches!(name.as_str(), "SSUBSCRIBE" | "SUNSUBSCRIBE")
                    && core.flavor == Flavor::Redis62
                {
                    unknown_command(args)
                } else {
                    let mut pushes = core.pubsub.subscription(conn, &name, &args[1..]);
                    if pushes.len() == 1 {
                        pushes.pop().expect("one")
                    } else {
                        Reply::Array(pushes)
                    }
                }
            }
            _ => self.core().command(&name, args, Resp::Three),
        };
        reply.into_value()
    }

    /// EVAL script numkeys key.. arg.. / EVALSHA sha1 numkeys key.. arg..
    fn eval(&mut self, name: &str, args: &[Vec<u8>]) -> Reply {
        if args.len() < 3 {
            return wrong_args(name);
        }
        let Some(numkeys) = parse_i64(&args[2]) else {
            return Reply::err(NOT_INTEGER);
        };
        if numkeys < 0 {
            return Reply::err("ERR Number of keys can't be negative");
        }
        if numkeys as usize > args.len() - 3 {
            return Reply::err("ERR Number of keys can't be greater than number of args");
        }
        let sha = if name == "EVAL" {
            match self.load(&args[1]) {
                Ok(sha) => sha,
                Err(reply) => return reply,
            }
        } else {
            String::from_utf8_lossy(&args[1]).to_ascii_lowercase()
        };
        let Some(func) = self.scripts.get(&sha) else {
            return Reply::err("NOSCRIPT No matching script. Please use EVAL.");
        };
        let (keys, argv) = args[3..].split_at(numkeys as usize);
        let result =
            lua::set_keys_argv(&self.lua, keys, argv).and_then(|()| func.call::<mlua::Value>(()));
        match result {
            Ok(value) => lua::from_lua(&value),
            Err(e) => Reply::err(self.script_error(&sha, &e)),
        }
    }

    /// The error reply of a script that failed with `e`, as this flavour
    /// words it: 7.0 keeps a failed command's error code, 6.2 makes every
    /// failure an ERR.
    fn script_error(&self, sha: &str, e: &mlua::Error) -> String {
        let (cause, from_command) = match lua::call_error(e) {
            Some(text) => (text.to_owned(), true),
            None => (lua::lua_message(e), false),
        };
        match self.flavor {
            Flavor::Redis7 if from_command => format!("{cause} script: {sha}, on @user_script."),
            Flavor::Redis7 => format!("ERR {cause} script: {sha}, on @user_script."),
            Flavor::Redis62 => {
                format!("ERR Error running script (call to f_{sha}): @user_script: {cause}")
            }
        }
    }

    /// Compiles and caches a script; its SHA1, or the compile error reply.
    fn load(&mut self, body: &[u8]) -> Result<String, Reply> {
        let text = std::str::from_utf8(body)
            .map_err(|_| Reply::err("ERR sim server: a script that is not UTF-8"))?;
        // redis-rs's own SHA1 of a script: the digest EVALSHA names.
        let sha = redis::Script::new(text).get_hash().to_owned();
        if !self.scripts.contains_key(&sha) {
            let func = match compiled(&sha) {
                // Loading the bytecode a server of this thread compiled from
                // the same text is the same function, without parsing again
                // (a twentieth of the simulator's time: every restart and
                // script flush loads its scripts anew).
                Some(bytecode) => self
                    .lua
                    .load(bytecode)
                    .set_name("@user_script")
                    .set_mode(mlua::ChunkMode::Binary)
                    .into_function()
                    .expect("bytecode this thread compiled loads"),
                None => {
                    let func = self
                        .lua
                        .load(body)
                        .set_name("@user_script")
                        .set_mode(mlua::ChunkMode::Text)
                        .into_function()
                        .map_err(|e| {
                            Reply::err(format!(
                                "ERR Error compiling script (new function): {}",
                                lua::lua_message(&e)
                            ))
                        })?;
                    remember_compiled(&sha, func.dump(false));
                    func
                }
            };
            self.scripts.insert(sha.clone(), func);
        }
        Ok(sha)
    }

    /// SCRIPT LOAD body / SCRIPT EXISTS sha.. / SCRIPT FLUSH [ASYNC|SYNC].
    fn script(&mut self, args: &[Vec<u8>]) -> Reply {
        let sub = args.get(1).map(|s| s.to_ascii_uppercase());
        match (sub.as_deref(), args.len()) {
            (Some(b"LOAD"), 3) => match self.load(&args[2]) {
                Ok(sha) => Reply::Bulk(sha.into_bytes()),
                Err(reply) => reply,
            },
            (Some(b"EXISTS"), n) if n >= 3 => Reply::Array(
                args[2..]
                    .iter()
                    .map(|sha| {
                        let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
                        Reply::Int(self.scripts.contains_key(&sha).into())
                    })
                    .collect(),
            ),
            (Some(b"FLUSH"), 2 | 3) => {
                self.flush_scripts();
                Reply::ok()
            }
            _ => panic!(
                "sim server: unmodelled command SCRIPT {}",
                args.get(1)
                    .map(|s| String::from_utf8_lossy(s))
                    .unwrap_or_default()
            ),
        }
    }

    /// The messages published since the last call, in order.
    pub fn take_deliveries(&mut self) -> Vec<Delivery> {
        std::mem::take(&mut self.core().deliveries)
    }

    /// Forgets `conn`'s subscriptions (its connection dropped).
    pub fn disconnect(&mut self, conn: u64) {
        self.core().pubsub.disconnect(conn);
    }

    /// SCRIPT FLUSH: every EVALSHA answers NOSCRIPT until loaded again.
    pub fn flush_scripts(&mut self) {
        self.scripts.clear();
    }

    /// A copy of the keyspace (for a replica, an AOF restart), without
    /// subscriptions or loaded scripts.
    pub fn data_copy(&self) -> Server {
        let db = self.core().db.clone();
        Server::with_db(self.flavor, db)
    }

    /// Every live key at `now_us`, sorted by name: its type, value and
    /// remaining TTL in ms (None: no expiry). Hash fields are sorted by
    /// name; sorted sets are in Redis's order (score, then member).
    pub fn dump(&self, now_us: u64) -> Vec<KeyDump> {
        self.core().db.dump((now_us / 1000) as i64)
    }

    /// One key of [`Server::dump`], if it is live.
    pub fn dump_key(&self, key: &[u8], now_us: u64) -> Option<KeyDump> {
        self.core().db.dump_key(key, (now_us / 1000) as i64)
    }

    /// Moves every key `moved` picks (live or not, with its expiry) from
    /// this server to `to`, replacing a key of that name there: a slot's
    /// keys migrating between cluster nodes.
    pub fn move_keys(&mut self, to: &mut Server, moved: impl Fn(&[u8]) -> bool) -> usize {
        let taken = self.core().db.take_where(moved);
        let n = taken.len();
        let mut core = to.core();
        for (key, entry) in taken {
            core.db.put(key, entry);
        }
        n
    }

    /// The name of every key held (expired or not), in order.
    pub fn key_names(&self) -> Vec<Vec<u8>> {
        self.core().db.names()
    }

    /// A slot moved away: every sharded subscription to a channel `ended`
    /// picks ends, each subscriber told by a `sunsubscribe` push (taken
    /// with [`Server::take_deliveries`]).
    pub fn end_sharded(&mut self, ended: impl Fn(&[u8]) -> bool) {
        let mut core = self.core();
        let core = &mut *core;
        core.pubsub.end_sharded(ended, &mut core.deliveries);
    }

    /// Replaces this server's keyspace with a copy of `from`'s (a replica
    /// catching up), keeping its own scripts and subscriptions: cheaper
    /// than [`Server::data_copy`], which starts a new Lua state.
    pub fn copy_data_from(&mut self, from: &Server) {
        let db = from.core().db.clone();
        self.core().db = db;
    }
}

/// One key as [`Server::dump`] shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyDump {
    /// The key's name.
    pub key: String,
    /// The value in a form two servers can compare (see `dump`'s docs).
    pub value: DumpValue,
    /// Remaining time to live in ms, None without expiry.
    pub pttl_ms: Option<i64>,
}

/// A key's value as dumped.
#[derive(Debug, Clone, PartialEq)]
pub enum DumpValue {
    /// A string.
    String(Vec<u8>),
    /// A hash, sorted by field.
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    /// A sorted set, in score order (then member).
    ZSet(Vec<(Vec<u8>, f64)>),
}
