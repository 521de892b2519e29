//! A simulated TCP socket under a driver: the bytes redis-rs writes are
//! read as RESP commands and carried to a simulated node as any simulated
//! request is (delays, FIFO, resets, pauses: [`crate::world`]), and the
//! node's replies and pushes come back as RESP3 bytes. A connection reset
//! ends the stream with an error, as a dropped TCP connection does, and the
//! driver above reconnects and re-sends as it does on a real network.

use std::collections::BTreeMap;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use redis::{PushInfo, Value};

use crate::resp::{encode, parse_command};

/// Where a command's reply goes when it arrives: the reply, or an error
/// once the connection dropped.
pub type Deliver = Box<dyn FnOnce(Result<Value, redis::RedisError>) + Send>;

/// What carries a socket's commands to its node: the world's connection.
pub trait Carrier: Send + Sync {
    /// Sends one command; its reply (or the connection's drop) goes to
    /// `deliver` when it arrives (the world's connection says whether a
    /// task of its own waits for it).
    fn dispatch(&self, args: Vec<Vec<u8>>, deliver: Deliver);
    /// The driver dropped its socket.
    fn hang_up(&self);
}
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What the two directions of one socket share.
#[derive(Default)]
pub struct Shared {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Bytes written that do not yet make a whole command.
    inbuf: Vec<u8>,
    /// Bytes for the driver to read.
    out: Vec<u8>,
    /// Replies that came back ahead of an earlier command's.
    replies: BTreeMap<u64, Value>,
    /// The number of the next command written, and of the next reply due.
    next_seq: u64,
    next_out: u64,
    /// The connection dropped (or the driver shut it).
    closed: bool,
    reader: Option<Waker>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection drops: the driver's next read fails.
    pub fn close(&self) {
        let mut s = self.state();
        s.closed = true;
        if let Some(w) = s.reader.take() {
            w.wake();
        }
    }

    /// The connection dropped (or the driver shut it): nothing more
    /// reaches the driver.
    pub fn is_closed(&self) -> bool {
        self.state().closed
    }

    /// A push frame (a pub/sub message) reaches the driver.
    pub fn push(&self, push: PushInfo) {
        let mut s = self.state();
        if s.closed {
            return;
        }
        encode(
            &Value::Push {
                kind: push.kind,
                data: push.data,
            },
            &mut s.out,
        );
        if let Some(w) = s.reader.take() {
            w.wake();
        }
    }

    fn reply(&self, seq: u64, reply: Value) {
        let mut s = self.state();
        if s.closed {
            return;
        }
        s.replies.insert(seq, reply);
        loop {
            let next = s.next_out;
            let Some(v) = s.replies.remove(&next) else {
                break;
            };
            match v {
                // A (un)subscription naming several channels: the server
                // answers with one confirmation push per channel, each
                // a frame of its own (the simulated server gives them as
                // one array).
                Value::Array(items)
                    if !items.is_empty()
                        && items.iter().all(|i| matches!(i, Value::Push { .. })) =>
                {
                    for item in &items {
                        encode(item, &mut s.out);
                    }
                }
                v => encode(&v, &mut s.out),
            }
            s.next_out += 1;
        }
        if let Some(w) = s.reader.take() {
            w.wake();
        }
    }
}

/// The driver's end of a simulated connection.
pub struct SimSocket {
    shared: Arc<Shared>,
    wire: Arc<dyn Carrier>,
}

impl SimSocket {
    /// The driver's end of `wire`'s connection, whose replies and pushes
    /// `shared` collects.
    pub fn new(shared: Arc<Shared>, wire: Arc<dyn Carrier>) -> SimSocket {
        SimSocket { shared, wire }
    }
}

impl Drop for SimSocket {
    fn drop(&mut self) {
        self.shared.close();
        self.wire.hang_up();
    }
}

impl AsyncRead for SimSocket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut s = self.shared.state();
        if !s.out.is_empty() {
            let n = s.out.len().min(buf.remaining());
            buf.put_slice(&s.out[..n]);
            s.out.drain(..n);
            return Poll::Ready(Ok(()));
        }
        if s.closed {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "simulated connection reset",
            )));
        }
        s.reader = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl AsyncWrite for SimSocket {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        let commands = {
            let mut s = self.shared.state();
            if s.closed {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "simulated connection reset",
                )));
            }
            // Whole commands straight from `bytes` when nothing is left
            // over from an earlier write (the common case: no copy).
            let mut pending = std::mem::take(&mut s.inbuf);
            let buf: &[u8] = if pending.is_empty() {
                bytes
            } else {
                pending.extend_from_slice(bytes);
                &pending
            };
            let mut commands = Vec::new();
            let mut at = 0;
            loop {
                match parse_command(&buf[at..]) {
                    Ok(Some((args, used))) => {
                        at += used;
                        let seq = s.next_seq;
                        s.next_seq += 1;
                        commands.push((seq, args));
                    }
                    Ok(None) => break,
                    Err(why) => {
                        return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, why)));
                    }
                }
            }
            s.inbuf = buf[at..].to_vec();
            commands
        };
        for (seq, args) in commands {
            let shared = Arc::clone(&self.shared);
            self.wire.dispatch(
                args,
                Box::new(move |reply| match reply {
                    Ok(v) => shared.reply(seq, v),
                    Err(_) => shared.close(),
                }),
            );
        }
        Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.shared.close();
        Poll::Ready(Ok(()))
    }
}
