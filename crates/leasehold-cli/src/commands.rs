//! Dispatch, and the one-shot commands: acquire, extend, release, status, list.

use leasehold::{Client, LockKind};
use serde_json::{Value, json};

use crate::args::{
    AcquireArgs, Cli, Command, CompletionsArgs, ExtendArgs, Global, KindArgs, ListArgs,
    ReleaseArgs, StatusArgs,
};
use crate::exit::Failure;
use crate::hold::take;
use crate::output::{self, Row, emit, emit_json, millis};
use crate::parse::LeaseArgs;
use crate::session::{connect, connect_for};

/// The man page, leasehold(1), written by build.rs from the clap definition.
pub(crate) const MAN_PAGE: &str = include_str!(concat!(env!("OUT_DIR"), "/leasehold.1"));

/// Runs the parsed command line; returns the exit code on success.
pub(crate) async fn dispatch(cli: Cli) -> Result<u8, Failure> {
    let global = &cli.global;
    match cli.command {
        Command::Run(args) => crate::run::run(global, args).await,
        Command::Elect(args) => {
            // This host's name, as `hostname` prints it.
            let host = || {
                nix::unistd::gethostname()
                    .ok()
                    .and_then(|h| h.into_string().ok())
                    .unwrap_or_else(|| format!("pid {}", std::process::id()))
            };
            crate::run::run(global, args.into_run(host)).await
        }
        Command::Acquire(args) => acquire(global, args).await,
        Command::Extend(args) => extend(global, args).await,
        Command::Release(args) => release(global, args).await,
        Command::Status(args) => status(global, args).await,
        Command::List(args) => list(global, args).await,
        Command::Completions(args) => Ok(completions(&args)),
        Command::Man => {
            emit(MAN_PAGE.trim_end());
            Ok(0)
        }
        Command::Demo(args) => crate::demo::demo(global, args).await,
        #[cfg(feature = "bench")]
        Command::Bench(args) => crate::bench::bench(global, args).await,
        #[cfg(feature = "bench")]
        Command::BenchWorker(args) => crate::bench::worker::worker(global, args).await,
        #[cfg(not(feature = "bench"))]
        Command::Bench(_) => Err(Failure::usage(crate::args::NO_BENCH)),
        // Handled in `main` before the runtime starts; the same code if not.
        Command::RunExec(args) => Ok(crate::run::exec(args)),
        Command::RunWatch(args) => Ok(crate::run::watch(&args)),
    }
}

/// `leasehold completions SHELL`: the completion script on stdout.
fn completions(args: &CompletionsArgs) -> u8 {
    use clap::CommandFactory;
    let shell = match args.shell {
        crate::args::Shell::Bash => clap_complete::Shell::Bash,
        crate::args::Shell::Zsh => clap_complete::Shell::Zsh,
        crate::args::Shell::Fish => clap_complete::Shell::Fish,
    };
    // The hidden helpers (`run-exec`, `run-watch`, ...) are not for typing.
    let full = Cli::command();
    let mut visible = clap::Command::new("leasehold")
        .args(full.get_arguments().cloned())
        .subcommands(full.get_subcommands().filter(|c| !c.is_hide_set()).cloned());
    let mut out = std::io::stdout().lock();
    clap_complete::generate(shell, &mut visible, "leasehold", &mut out);
    0
}

/// `leasehold acquire`: take the lock, stop renewing, print token and fence.
async fn acquire(global: &Global, args: AcquireArgs) -> Result<u8, Failure> {
    let started = std::time::Instant::now();
    let mut lease = LeaseArgs::new(args.ttl, &args.wait, global);
    let client = connect_for(global, &lease).await?;
    lease.spend(started.elapsed());
    let guard = take(&client, &args.name, &lease).await?;
    let fence = guard.fence();
    let token = guard.detach();
    if global.json {
        emit_json(&json!({
            "name": args.name,
            "token": token,
            "fence": fence,
            "ttl_ms": millis(args.ttl),
        }));
    } else {
        emit(&format!(
            "token={token}\nfence={fence}\nttl_ms={}",
            millis(args.ttl)
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

/// `leasehold release`: release the lease held under TOKEN, or with
/// --force break whatever holds NAME.
async fn release(global: &Global, args: ReleaseArgs) -> Result<u8, Failure> {
    let client = connect(global).await?;
    let Some(token) = &args.token else {
        return force_release(global, &client, &args.name).await;
    };
    client.lock(&args.name).release_by_token(token).await?;
    if global.json {
        emit_json(&json!({ "name": args.name, "released": true }));
    } else {
        emit(&format!("released lock {:?}", args.name));
    }
    Ok(0)
}

/// `leasehold release --force NAME`: break whatever holds NAME (asking
/// first on a terminal) and say what was removed.
async fn force_release(global: &Global, client: &Client, name: &str) -> Result<u8, Failure> {
    use std::io::IsTerminal;
    if std::io::stdin().is_terminal() {
        let shown = StatusArgs {
            name: name.to_owned(),
            kind: KindArgs::default(),
        };
        let (_, human) = read_status(client, &shown).await?;
        let question = format!(
            "{human}\nbreak it? its holder is not told and may run on beside the next one [y/N] "
        );
        let answer = tokio::task::spawn_blocking(move || {
            use std::io::Write;
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "{question}");
            let _ = err.flush();
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).map(|_| line)
        })
        .await
        .map_err(|e| Failure::with_code(crate::exit::SOFTWARE, e.to_string()))?
        .unwrap_or_default();
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            return Err(Failure::with_code(
                1,
                format!("not broken: {:?} is left as it is", output::printable(name)),
            ));
        }
    }
    let broken = match client.break_lease(name).await {
        Ok(broken) => broken,
        // A key no lock wrote: which, and what it holds (left as it was).
        Err(leasehold::Error::WrongType { key }) => {
            return Err(crate::hold::foreign_key(client, &key).await);
        }
        Err(e) => return Err(e.into()),
    };
    if global.json {
        emit_json(&output::broken_json(name, broken.as_ref()));
    } else {
        emit(&output::broken_human(name, broken.as_ref()));
    }
    Ok(0)
}

/// `leasehold status`: one lock's state, of the kind found on the server
/// (or the one the flags name).
async fn status(global: &Global, args: StatusArgs) -> Result<u8, Failure> {
    let client = connect(global).await?;
    let (json, human) = match read_status(&client, &args).await {
        Ok(shown) => shown,
        Err(leasehold::Error::WrongType { key }) => {
            // The flag named another kind than the one holding NAME: say
            // which; a key of another type: which, and what it holds.
            let kind = match client.kind(&args.name).await {
                Ok(Some(kind)) if key.ends_with(":lock") => kind,
                Err(leasehold::Error::WrongType { key }) => {
                    return Err(crate::hold::foreign_key(&client, &key).await);
                }
                _ => return Err(crate::hold::foreign_key(&client, &key).await),
            };
            let failure = Failure::from(leasehold::Error::WrongType { key });
            let hint = format!(
                "{:?} is a {kind}: pass {}, or no kind flag and status finds the kind out",
                output::printable(&args.name),
                match kind {
                    LockKind::Reentrant => "--reentrant",
                    LockKind::RwLock => "--read",
                    LockKind::Semaphore => "--permits N",
                    _ => "none of --read, --write, --permits and --reentrant",
                }
            );
            return Err(Failure::with_code(
                failure.code,
                format!("{}; {hint}", failure.message),
            ));
        }
        Err(err) => return Err(err.into()),
    };
    if global.json {
        emit_json(&json);
    } else {
        emit(&human);
    }
    Ok(0)
}

/// The status of the lock `args` names, as JSON and as human text: of the
/// kind the flags name, else of the kind that holds it (a free name shows
/// as a free plain lock, with its last fence).
async fn read_status(client: &Client, args: &StatusArgs) -> leasehold::Result<(Value, String)> {
    let name = args.name.as_str();
    let flags = &args.kind;
    let kind = if flags.reentrant {
        Some(LockKind::Reentrant)
    } else if flags.read || flags.write {
        Some(LockKind::RwLock)
    } else if flags.permits.is_some() {
        Some(LockKind::Semaphore)
    } else {
        client.kind(name).await?
    };
    Ok(match kind {
        Some(LockKind::Reentrant) => {
            let status = client.reentrant_lock(name).status().await?;
            (
                output::reentrant_status_json(&status),
                output::reentrant_status_human(&status),
            )
        }
        Some(LockKind::RwLock) => {
            let status = client.rw_lock(name).status().await?;
            (
                output::rw_status_json(&status),
                output::rw_status_human(&status),
            )
        }
        Some(LockKind::Semaphore) => {
            let status = client
                .semaphore(name, flags.permits.unwrap_or(1))
                .status()
                .await?;
            (
                output::semaphore_status_json(&status),
                output::semaphore_status_human(&status),
            )
        }
        _ => {
            let status = client.lock(name).status().await?;
            let (mut json, mut human) =
                (output::status_json(&status), output::status_human(&status));
            // An election is its lock with the leader's value beside it
            // (`elect`); a Redlock client has no elections.
            if status.holder.is_some()
                && let Ok(Some(leader)) = client.election(name).leader().await
            {
                json["kind"] = json!(LockKind::Election.as_str());
                json["leader"] = json!({ "value": leader.value, "term": leader.term });
                human.push_str(&format!(
                    "\nleader     {} (term {})",
                    output::printable(&leader.value),
                    leader.term
                ));
            }
            (json, human)
        }
    })
}

/// `leasehold list`: the held locks of every kind whose names match the pattern.
async fn list(global: &Global, args: ListArgs) -> Result<u8, Failure> {
    let client = connect(global).await?;
    let mut rows = Vec::new();
    let mut objects = Vec::new();
    for (name, kind) in client.list_kinds(&args.pattern).await? {
        // Released between the scan and this read: shown as found now.
        let (row, object) = match kind {
            LockKind::Reentrant => {
                let s = client.reentrant_lock(&name).status().await?;
                let row = Row {
                    name,
                    kind: "reentrant",
                    holder: s
                        .owner
                        .as_ref()
                        .map_or_else(|| "-".to_owned(), |o| format!("{o} x{}", s.holds)),
                    remaining: s.remaining,
                    fence: s.fence,
                    waiting: "-".to_owned(),
                    about: None,
                };
                (row, output::reentrant_status_json(&s))
            }
            LockKind::RwLock => {
                let s = client.rw_lock(&name).status().await?;
                let last = s.readers.iter().max_by_key(|r| r.remaining);
                let (holder, remaining, about) = match &s.writer {
                    Some(w) => (
                        format!("{} (writer)", w.holder),
                        Some(w.remaining),
                        w.about.clone(),
                    ),
                    None => (
                        format!("{} reader(s)", s.reader_count),
                        last.map(|r| r.remaining),
                        last.and_then(|r| r.about.clone()),
                    ),
                };
                let row = Row {
                    name,
                    kind: "rwlock",
                    holder,
                    remaining,
                    fence: s.fence,
                    waiting: s.waiting_writers.to_string(),
                    about,
                };
                (row, output::rw_status_json(&s))
            }
            LockKind::Semaphore => {
                let s = client.semaphore(&name, 1).status().await?;
                let of = s.permits.map_or_else(String::new, |n| format!("/{n}"));
                let row = Row {
                    name,
                    kind: "semaphore",
                    holder: format!("{}{of} permits", s.held),
                    remaining: s.holders.iter().map(|h| h.remaining).max(),
                    fence: s.fence,
                    waiting: "-".to_owned(),
                    about: s
                        .holders
                        .iter()
                        .max_by_key(|h| h.remaining)
                        .and_then(|h| h.about.clone()),
                };
                (row, output::semaphore_status_json(&s))
            }
            _ => {
                let s = client.lock(&name).status().await?;
                let row = Row {
                    name,
                    kind: kind.as_str(),
                    holder: s.holder.clone().unwrap_or_else(|| "-".to_owned()),
                    remaining: s.remaining,
                    fence: s.fence,
                    waiting: s.waiting_clients.to_string(),
                    about: s.holder_about.clone(),
                };
                let mut object = output::status_json(&s);
                object["kind"] = json!(kind.as_str());
                (row, object)
            }
        };
        rows.push(row);
        objects.push(object);
    }
    if global.json {
        emit_json(&json!({
            "prefix": global.prefix,
            "pattern": args.pattern,
            "locks": objects,
        }));
    } else if rows.is_empty() {
        emit(&format!(
            "no locks held under prefix {:?} match {:?}",
            global.prefix, args.pattern
        ));
    } else {
        emit(&output::list_human(&rows));
    }
    Ok(0)
}
