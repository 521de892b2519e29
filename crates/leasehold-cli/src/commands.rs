//! Dispatch, and the one-shot commands: acquire, extend, release, status, list.

use leasehold::{Client, Lock, LockGuard};
use serde_json::{Value, json};

use crate::cli::{
    AcquireArgs, Cli, Command, ExtendArgs, Global, LeaseArgs, ListArgs, Mode, ReleaseArgs, Servers,
    StatusArgs,
};
use crate::exit::{self, Failure};
use crate::output::{self, emit, emit_json, millis};

/// Runs the parsed command line; returns the exit code on success.
pub(crate) async fn dispatch(cli: Cli) -> Result<u8, Failure> {
    let global = &cli.global;
    match cli.command {
        Command::Run(args) => crate::run::run(global, args).await,
        Command::Acquire(args) => acquire(global, args).await,
        Command::Extend(args) => extend(global, args).await,
        Command::Release(args) => release(global, args).await,
        Command::Status(args) => status(global, args).await,
        Command::List(args) => list(global, args).await,
        Command::Demo(args) => crate::demo::demo(global, args).await,
        #[cfg(feature = "bench")]
        Command::Bench(args) => crate::bench::bench(global, args).await,
        #[cfg(feature = "bench")]
        Command::BenchWorker(args) => crate::bench::worker::worker(global, args).await,
        #[cfg(not(feature = "bench"))]
        Command::Bench(_) => Err(Failure::usage(crate::cli::NO_BENCH)),
        // Handled in `main` before the runtime starts; the same code if not.
        Command::RunExec(args) => Ok(crate::run::exec(args)),
        Command::RunWatch(args) => Ok(crate::run::watch(&args)),
    }
}

/// Connects to the Redis the global options name: one server, or a
/// Redlock over three or more.
pub(crate) async fn connect(global: &Global) -> Result<Client, Failure> {
    match global.servers()? {
        Servers::One(url) => connect_to(&url, &global.prefix).await,
        Servers::Redlock(urls) => {
            let mut builder = Client::builder().redlock(urls).prefix(&global.prefix);
            if let Some(timeout) = global.node_timeout {
                builder = builder.node_timeout(timeout);
            }
            Ok(builder.build().await?)
        }
    }
}

/// Connects to `url` with keys under `prefix`.
pub(crate) async fn connect_to(url: &str, prefix: &str) -> Result<Client, Failure> {
    Ok(Client::builder().url(url).prefix(prefix).build().await?)
}

/// Takes the lock `name` per `lease`.
pub(crate) async fn take(
    client: &Client,
    name: &str,
    lease: &LeaseArgs,
) -> Result<LockGuard, Failure> {
    let lock: Lock = client.lock(name).ttl(lease.ttl).wait(lease.wait);
    per_lease(
        lease,
        async || lock.try_acquire().await,
        async || lock.acquire().await,
        || format!("lock {name:?} is held by someone else; see who with `leasehold status {name}`"),
    )
    .await
}

/// Acquires per `lease`: `wait` (the handle waits up to `--wait`), or
/// with `--no-wait` `once`, which fails with exit 75 when the hold is
/// taken; `busy` says by whom, for that message.
pub(crate) async fn per_lease<G>(
    lease: &LeaseArgs,
    once: impl AsyncFnOnce() -> leasehold::Result<Option<G>>,
    wait: impl AsyncFnOnce() -> leasehold::Result<G>,
    busy: impl FnOnce() -> String,
) -> Result<G, Failure> {
    if lease.no_wait {
        once().await?.ok_or_else(|| {
            Failure::with_code(
                exit::TEMPFAIL,
                format!("{} (--no-wait); try later, or wait with --wait", busy()),
            )
        })
    } else {
        Ok(wait().await?)
    }
}

/// `leasehold acquire`: take the lock, stop renewing, print token and fence.
async fn acquire(global: &Global, args: AcquireArgs) -> Result<u8, Failure> {
    let client = connect(global).await?;
    let guard = take(&client, &args.name, &args.lease).await?;
    let fence = guard.fence();
    let token = guard.detach();
    if global.json {
        emit_json(&json!({
            "name": args.name,
            "token": token,
            "fence": fence,
            "ttl_ms": millis(args.lease.ttl),
        }));
    } else {
        emit(&format!(
            "token={token}\nfence={fence}\nttl_ms={}",
            millis(args.lease.ttl)
        ));
    }
    Ok(0)
}

/// `leasehold extend`: move the end of the lease held under TOKEN.
async fn extend(global: &Global, args: ExtendArgs) -> Result<u8, Failure> {
    let client = connect(global).await?;
    client
        .lock(&args.name)
        .extend_by_token(&args.token, args.ttl)
        .await?;
    if global.json {
        emit_json(&json!({
            "name": args.name,
            "extended": true,
            "ttl_ms": millis(args.ttl),
        }));
    } else {
        emit(&format!(
            "extended lock {:?}: the lease ends in {}",
            args.name,
            output::short(args.ttl)
        ));
    }
    Ok(0)
}

/// `leasehold release`: release the lease held under TOKEN.
async fn release(global: &Global, args: ReleaseArgs) -> Result<u8, Failure> {
    let client = connect(global).await?;
    client
        .lock(&args.name)
        .release_by_token(&args.token)
        .await?;
    if global.json {
        emit_json(&json!({ "name": args.name, "released": true }));
    } else {
        emit(&format!("released lock {:?}", args.name));
    }
    Ok(0)
}

/// `leasehold status`: one lock's state, of the kind the flags name.
async fn status(global: &Global, args: StatusArgs) -> Result<u8, Failure> {
    let client = connect(global).await?;
    let (json, human) = read_status(&client, &args).await.map_err(|err| {
        let wrong_type = matches!(err, leasehold::Error::WrongType { .. });
        let failure = Failure::from(err);
        if wrong_type {
            Failure::with_code(
                failure.code,
                format!(
                    "{}; or NAME is another kind of lock: pass --read, --permits N or \
                     --reentrant, or none of them for a plain lock",
                    failure.message
                ),
            )
        } else {
            failure
        }
    })?;
    if global.json {
        emit_json(&json);
    } else {
        emit(&human);
    }
    Ok(0)
}

/// The status of the lock `args` names, as JSON and as human text.
async fn read_status(client: &Client, args: &StatusArgs) -> leasehold::Result<(Value, String)> {
    let name = args.name.as_str();
    if args.reentrant {
        let status = client.reentrant_lock(name).status().await?;
        return Ok((
            output::reentrant_status_json(&status),
            output::reentrant_status_human(&status),
        ));
    }
    Ok(match args.hold.mode() {
        Mode::Lock => {
            let status = client.lock(name).status().await?;
            (output::status_json(&status), output::status_human(&status))
        }
        Mode::Read | Mode::Write => {
            let status = client.rw_lock(name).status().await?;
            (
                output::rw_status_json(&status),
                output::rw_status_human(&status),
            )
        }
        Mode::Permits(n) => {
            let status = client.semaphore(name, n).status().await?;
            (
                output::semaphore_status_json(&status),
                output::semaphore_status_human(&status),
            )
        }
    })
}

/// `leasehold list`: the held locks whose names match the pattern.
async fn list(global: &Global, args: ListArgs) -> Result<u8, Failure> {
    let client = connect(global).await?;
    let locks = client.list(&args.pattern).await?;
    if global.json {
        let locks: Vec<_> = locks.iter().map(output::status_json).collect();
        emit_json(&json!({
            "prefix": global.prefix,
            "pattern": args.pattern,
            "locks": locks,
        }));
    } else if locks.is_empty() {
        emit(&format!(
            "no locks held under prefix {:?} match {:?}",
            global.prefix, args.pattern
        ));
    } else {
        emit(&output::list_human(&locks));
    }
    Ok(0)
}
