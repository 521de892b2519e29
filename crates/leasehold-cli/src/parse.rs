//! The command line parsed and checked: clap's matches read (flags, then
//! `LEASEHOLD_*` variables), every check that needs no server (exit 64
//! before connecting), one-line usage errors; the definition itself is
//! `args.rs`.

use std::ffi::OsString;
use std::time::Duration;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches};

use crate::args::*;

use crate::exit::Failure;

/// The server used when neither `--url` nor `LEASEHOLD_URL` is given.
pub(crate) const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// What the process should do after parsing the command line.
#[derive(Debug)]
pub(crate) enum Parsed {
    /// Run this command.
    Run(Box<Cli>),
    /// Help or version was printed; exit 0.
    Done,
}

/// Parses `args` (program name first). Help and version are printed here;
/// every other clap error becomes a one-line usage [`Failure`] (exit 64).
///
/// Twice: first the command line alone, without any variable, which tells
/// what it gives (clap's [`ValueSource::CommandLine`]); then with the
/// variables of what it does not give. A variable is never read beside its
/// flag, so a bad one cannot fail a command line that does not use it
/// (clap would read it anyway when the option comes before the command:
/// each command parses the global options again, finds this one missing
/// from its own part of the line, and takes the variable). A `--url` on the
/// command line takes its topology from the command line only (see
/// docs/CLI.md, "Flags and variables").
pub(crate) fn parse<I, T>(args: I) -> Result<Parsed, Failure>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    // With no option's variable set (blank counts as unset), no option can
    // come from one: the pass that tells the command line's options from
    // the variables' is not needed (building, running and dropping clap's
    // command is a quarter of a one-shot `run`'s instructions, issue 34),
    // and an error of the one pass left is the command line's. Other
    // LEASEHOLD_* variables do not count: LEASEHOLD_FENCE and the like,
    // which a `leasehold run` inside another one inherits, are no option's.
    let any_variable = OPTION_VARIABLES.iter().any(|name| {
        std::env::var_os(name).is_some_and(|value| !value.to_string_lossy().trim().is_empty())
    });
    let on_line = if any_variable {
        // Kept for given_on_line: building clap's command again costs more
        // than the parse itself.
        let mut first = command_reading(|_| false);
        let on_line = match first.try_get_matches_from_mut(&args) {
            Ok(matches) => given_on_line(&first, &matches),
            // Printed below, by the command that names the variables.
            Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
                Vec::new()
            }
            Err(e) => return Err(Failure::usage(one_line(&e, &args, false))),
        };
        // Not freed, as `command` below.
        std::mem::forget(first);
        on_line
    } else {
        Vec::new()
    };
    let url_on_line = on_line.iter().any(|id| id == "urls");
    let unused = if url_on_line {
        unused_topology(&on_line)
    } else {
        Vec::new()
    };
    // A variable is read unless its flag is on the line, or it is a
    // topology variable beside a --url on the line.
    let not_read = |id: &str| {
        on_line.iter().any(|given| given == id) || (url_on_line && TOPOLOGY.contains(&id))
    };
    let mut command = command_reading(|id| !not_read(id));
    let parsed = command
        .try_get_matches_from_mut(&args)
        .and_then(|mut matches| {
            // Before from_arg_matches_mut, which takes the values out; from
            // the command that parsed them (building another one cost a
            // tenth of a one-shot `run`'s instructions, issue 34).
            let from_env = from_env(&command, &matches);
            let mut cli = Cli::from_arg_matches_mut(&mut matches)?;
            cli.global.from_env = from_env;
            cli.global.unused_env = unused;
            Ok(cli)
        });
    // Not freed: the process is about to run one command and exit, which
    // frees it all at once; freeing clap's whole definition one piece at a
    // time cost 160,000 instructions, a twentieth of a one-shot `run`
    // (issue 34).
    std::mem::forget(command);
    match parsed {
        Ok(mut cli) => {
            cli.global.settle_conflicts()?;
            cli.global.check()?;
            check_kind_on_redlock(&cli)?;
            check_name(&cli.command)?;
            Ok(Parsed::Run(Box::new(cli)))
        }
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            // Printing help can only fail on a closed stdout; nothing to add then.
            let _ = e.print();
            Ok(Parsed::Done)
        }
        // The command line alone parsed: the error is a variable's (with no
        // variable set, it is the command line's).
        Err(e) => Err(Failure::usage(one_line(&e, &args, any_variable))),
    }
}

/// What the name of every variable an option is read from starts with
/// (`LEASEHOLD_URL`, ...; the unit test `every_variable_has_the_prefix`).
#[cfg(test)]
const VARIABLE_PREFIX: &str = "LEASEHOLD_";

/// The variable of every option that has one (the unit test
/// `option_variables_are_the_options_variables` keeps the list whole).
const OPTION_VARIABLES: [&str; 12] = [
    "LEASEHOLD_URL",
    "LEASEHOLD_CLUSTER",
    "LEASEHOLD_SENTINEL",
    "LEASEHOLD_TLS_CA",
    "LEASEHOLD_TLS_CERT",
    "LEASEHOLD_TLS_KEY",
    "LEASEHOLD_CONNECT_TIMEOUT",
    "LEASEHOLD_NODE_TIMEOUT",
    "LEASEHOLD_PREFIX",
    "LEASEHOLD_JSON",
    "LEASEHOLD_VERBOSE",
    "LEASEHOLD_QUIET",
];

/// The ids of the options that set how the `--url`s are taken.
const TOPOLOGY: [&str; 2] = ["cluster", "sentinel"];

/// The clap command reading the variable of each option whose id `read`
/// accepts, except a variable set but empty (or blank), which counts as
/// unset, as an empty `LEASEHOLD_URL` always did.
fn command_reading(read: impl Fn(&str) -> bool) -> clap::Command {
    Cli::command().mut_args(|arg| {
        let blank = arg
            .get_env()
            .and_then(std::env::var_os)
            .is_some_and(|value| value.to_string_lossy().trim().is_empty());
        if arg.get_env().is_some() && (blank || !read(arg.get_id().as_str())) {
            arg.env(None)
        } else {
            arg
        }
    })
}

/// The ids of the global options the command line gives, before or after
/// the command (clap hands a global option given after it up to the top),
/// as `command` parsed it into `matches`.
fn given_on_line(command: &clap::Command, matches: &ArgMatches) -> Vec<String> {
    command
        .get_arguments()
        .filter(|arg| matches.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine))
        .map(|arg| arg.get_id().as_str().to_owned())
        .collect()
}

/// The topology variables not read because a `--url` is on the command
/// line, when they would have changed how it is taken, each with what to
/// say: LEASEHOLD_SENTINEL set, LEASEHOLD_CLUSTER set to anything but false.
fn unused_topology(on_line: &[String]) -> Vec<String> {
    use clap::builder::TypedValueParser;
    let command = Cli::command();
    let mut unused = Vec::new();
    for arg in command.get_arguments() {
        let id = arg.get_id().as_str();
        if !TOPOLOGY.contains(&id) || on_line.iter().any(|given| given == id) {
            continue;
        }
        let Some(var) = arg.get_env() else { continue };
        let Some(value) = std::env::var_os(var) else {
            continue;
        };
        let text = value.to_string_lossy();
        if text.trim().is_empty() {
            continue;
        }
        let var = var.to_string_lossy();
        let flag = format!("--{}", arg.get_long().unwrap_or(id));
        let add = if arg.get_action().takes_values() {
            format!("{flag} {}", text.trim())
        } else {
            let is_false = clap::builder::BoolishValueParser::new()
                .parse_ref(&command, None, &value)
                .is_ok_and(|on| !on);
            if is_false {
                continue;
            }
            flag
        };
        unused.push(format!(
            "{var} is not used: a --url on the command line takes {} from the command line only; \
             add {add} to use it, or unset {var}",
            TOPOLOGY.map(|t| format!("--{t}")).join(" and ")
        ));
    }
    unused
}

/// The ids of the global options whose value came from their variable,
/// each with the variable's name, as `command` parsed it into `matches`.
fn from_env(command: &clap::Command, matches: &ArgMatches) -> Vec<(String, String)> {
    command
        .get_arguments()
        .filter(|arg| matches.value_source(arg.get_id().as_str()) == Some(ValueSource::EnvVariable))
        .filter_map(|arg| {
            let var = arg.get_env()?.to_string_lossy().into_owned();
            Some((arg.get_id().as_str().to_owned(), var))
        })
        .collect()
}

/// Whether `--json` or `LEASEHOLD_JSON` asks for JSON, known before
/// parsing so that a usage error is JSON too.
pub(crate) fn json_asked(args: &[OsString]) -> bool {
    use clap::builder::TypedValueParser;
    let flag = args
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "--json");
    flag || std::env::var_os("LEASEHOLD_JSON").is_some_and(|value| {
        clap::builder::BoolishValueParser::new()
            .parse_ref(&Cli::command(), None, &value)
            .unwrap_or(false)
    })
}

/// The library's rules for a lock name (1 to 512 bytes), checked before
/// connecting.
fn check_name(command: &Command) -> Result<(), Failure> {
    let name = match command {
        Command::Run(args) => {
            for name in &args.more {
                check_one_name(name)?;
            }
            if let Some(flag) = match args.hold.mode() {
                _ if args.more.is_empty() => None,
                Mode::Lock => None,
                Mode::Read => Some("--read"),
                Mode::Write => Some("--write"),
                Mode::Permits(_) => Some("--permits"),
            } {
                return Err(Failure::usage(format!(
                    "several NAMEs are taken as plain locks only: drop {flag}, or give one NAME"
                )));
            }
            &args.name
        }
        Command::Elect(args) => &args.name,
        Command::Acquire(args) => &args.name,
        Command::Extend(args) => &args.name,
        Command::Release(args) => &args.name,
        Command::Status(args) => &args.name,
        _ => return Ok(()),
    };
    check_one_name(name)
}

/// One lock name against the library's rules.
fn check_one_name(name: &str) -> Result<(), Failure> {
    if name.is_empty() {
        return Err(Failure::usage(
            "NAME is empty: give the lock a name, e.g. nightly-backup",
        ));
    }
    if name.len() > 512 {
        return Err(Failure::usage(format!(
            "NAME is {} bytes long, over the limit of 512: use a shorter name",
            name.len()
        )));
    }
    Ok(())
}

/// Refuses, before connecting, a kind of lock Redlock does not have: on
/// independent masters only the plain lock exists.
fn check_kind_on_redlock(cli: &Cli) -> Result<(), Failure> {
    if !matches!(cli.global.servers()?, Servers::Redlock(_)) {
        return Ok(());
    }
    let flag = match &cli.command {
        Command::Run(run) => match run.hold.mode() {
            Mode::Lock => None,
            Mode::Read => Some("--read"),
            Mode::Write => Some("--write"),
            Mode::Permits(_) => Some("--permits"),
        },
        Command::Elect(_) => Some("elect"),
        Command::Status(status) => {
            let kind = &status.kind;
            [
                (kind.read, "--read"),
                (kind.write, "--write"),
                (kind.permits.is_some(), "--permits"),
                (kind.reentrant, "--reentrant"),
            ]
            .into_iter()
            .find_map(|(given, flag)| given.then_some(flag))
        }
        _ => None,
    };
    match flag {
        Some(flag) => Err(Failure::usage(format!(
            "{flag} is not available on Redlock (three or more --url): only the plain lock can \
             be split over independent masters; drop {flag}, or pass one --url (or --cluster, \
             --sentinel)"
        ))),
        None => Ok(()),
    }
}

/// Reduces clap's multi-line error (usage, tips) to one line plus a hint;
/// `from_variable`: the command line alone parsed, so a bad value is a
/// variable's, and the message names it.
fn one_line(err: &clap::Error, args: &[OsString], from_variable: bool) -> String {
    if err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        return "no command given; see `leasehold --help`".to_owned();
    }
    // The message is the first paragraph (a list of missing arguments may
    // follow the first line); usage and tips come after a blank line.
    let rendered = err.render().to_string();
    let paragraph: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .skip_while(|l| l.is_empty())
        .take_while(|l| !l.is_empty())
        .collect();
    let joined = if paragraph.is_empty() {
        "invalid command line".to_owned()
    } else {
        paragraph.join(" ")
    };
    let joined = without_secrets(&joined);
    let first = joined.strip_prefix("error: ").unwrap_or(&joined);
    let first = match variable_of(err).filter(|_| from_variable) {
        Some(var) => format!("in {var}: {first}"),
        None => first.to_owned(),
    };
    let is_run = args.iter().skip(1).any(|a| a == "run");
    let has_separator = args.iter().any(|a| a == "--");
    if is_run
        && !has_separator
        && matches!(
            err.kind(),
            ErrorKind::UnknownArgument
                | ErrorKind::MissingRequiredArgument
                | ErrorKind::TooManyValues
        )
    {
        return format!(
            "{first}; put `--` before the command: leasehold run NAME [OPTIONS] -- CMD [ARGS...]"
        );
    }
    format!("{first}; see `leasehold --help`")
}

/// clap's `message` with each value it quotes ('...') that may be a URL
/// (it holds `://` or `@`) shown through [`leasehold::redact_url`]: clap
/// echoes what it did not expect, and a URL typed without its `--url`, or
/// given to another option, carries its password.
fn without_secrets(message: &str) -> String {
    message
        .split('\'')
        .enumerate()
        .map(|(i, part)| {
            let quoted = i % 2 == 1;
            if quoted && (part.contains("://") || part.contains('@')) {
                leasehold::redact_url(part)
            } else {
                part.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("'")
}

/// The variable of the option a bad value was given to (clap's message
/// names the flag only), when it has one and it is set.
fn variable_of(err: &clap::Error) -> Option<String> {
    if !matches!(
        err.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return None;
    }
    let Some(ContextValue::String(invalid)) = err.get(ContextKind::InvalidArg) else {
        return None;
    };
    // "--connect-timeout <DURATION>", "--verbose...", "-v, --verbose".
    let flag = invalid
        .split([' ', ','])
        .find(|word| word.starts_with("--"))?
        .trim_end_matches('.');
    let command = Cli::command();
    let arg = command.get_arguments().find(|arg| {
        arg.get_long()
            .is_some_and(|long| flag == format!("--{long}"))
    })?;
    let var = arg.get_env()?.to_string_lossy().into_owned();
    std::env::var_os(&var)?;
    Some(var)
}

impl Global {
    /// How a message names the option `id`: by its variable when its value
    /// came from there, else by `flag`.
    pub(crate) fn named(&self, id: &str, flag: &str) -> String {
        self.from_env
            .iter()
            .find(|(from, _)| from == id)
            .map_or_else(|| flag.to_owned(), |(_, var)| var.clone())
    }

    /// Whether the option `id` came from its variable.
    fn is_from_env(&self, id: &str) -> bool {
        self.from_env.iter().any(|(from, _)| from == id)
    }

    /// Settles the options that exclude each other (--verbose and --quiet,
    /// --cluster and --sentinel): a flag on the command line wins over a
    /// variable; two flags, or two variables, are refused.
    ///
    /// # Errors
    ///
    /// A usage failure naming both.
    pub(crate) fn settle_conflicts(&mut self) -> Result<(), Failure> {
        if self.verbose > 0 && self.quiet {
            match (self.is_from_env("verbose"), self.is_from_env("quiet")) {
                (true, false) => self.verbose = 0,
                (false, true) => self.quiet = false,
                _ => {
                    return Err(Failure::usage(format!(
                        "{} and {} cannot be used together; drop one",
                        self.named("verbose", "--verbose"),
                        self.named("quiet", "--quiet")
                    )));
                }
            }
        }
        if self.cluster && self.sentinel.is_some() {
            match (self.is_from_env("cluster"), self.is_from_env("sentinel")) {
                (true, false) => self.cluster = false,
                (false, true) => self.sentinel = None,
                _ => {
                    return Err(Failure::usage(format!(
                        "{} and {} cannot be used together: a Redis Cluster has no Sentinels; \
                         drop one",
                        self.named("cluster", "--cluster"),
                        self.named("sentinel", "--sentinel")
                    )));
                }
            }
        }
        Ok(())
    }

    /// The server URLs to use: the `--url`s, or those of `LEASEHOLD_URL`
    /// (separated by spaces). `None` when neither gave one.
    pub(crate) fn given_urls(&self) -> Option<Vec<String>> {
        let urls: Vec<String> = if self.is_from_env("urls") {
            self.urls
                .iter()
                .flat_map(|urls| urls.split_whitespace())
                .map(str::to_owned)
                .collect()
        } else {
            self.urls.clone()
        };
        (!urls.is_empty()).then_some(urls)
    }

    /// The servers to use: one, the masters of a Redlock, a cluster or
    /// the sentinels of a master.
    ///
    /// # Errors
    ///
    /// A usage failure for two URLs, or one server named three times.
    pub(crate) fn servers(&self) -> Result<Servers, Failure> {
        let urls = self
            .given_urls()
            .unwrap_or_else(|| vec![DEFAULT_URL.to_owned()]);
        if self.cluster {
            return Ok(Servers::Cluster(urls));
        }
        if let Some(master) = &self.sentinel {
            return Ok(Servers::Sentinel {
                sentinels: urls,
                master: master.clone(),
            });
        }
        servers_of(urls, &self.named("urls", "--url"))
    }

    /// Checks everything that can be checked without a server, so a bad
    /// command line is a usage error (64) even when Redis is unreachable.
    ///
    /// # Errors
    ///
    /// A usage failure naming the flag.
    pub(crate) fn check(&self) -> Result<(), Failure> {
        let servers = self.servers()?;
        let urls = match &servers {
            Servers::One(url) => vec![url.clone()],
            Servers::Redlock(urls) | Servers::Cluster(urls) => urls.clone(),
            Servers::Sentinel { sentinels, .. } => sentinels.clone(),
        };
        let mut addresses = Vec::new();
        let url_flag = self.named("urls", "--url");
        for url in &urls {
            addresses.push(address_named(url, &url_flag)?);
        }
        if let Servers::Redlock(_) = servers {
            for (i, address) in addresses.iter().enumerate() {
                if addresses[..i].contains(address) {
                    return Err(Failure::usage(format!(
                        "{url_flag} {address} is given twice: Redlock needs distinct, independent \
                         masters, and copies of the same server are not a quorum; pass each \
                         server once"
                    )));
                }
            }
        }
        if self.node_timeout.is_some() && !matches!(servers, Servers::Redlock(_)) {
            let flag = self.named("node_timeout", "--node-timeout");
            return Err(Failure::usage(format!(
                "{flag} is for Redlock (three or more --url), but one Redis is given; \
                 drop {flag}, or pass three or more --url"
            )));
        }
        check_prefix(&self.prefix, &self.named("prefix", "--prefix"))?;
        let (cert, key) = (
            self.named("tls_cert", "--tls-cert"),
            self.named("tls_key", "--tls-key"),
        );
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), None) => {
                return Err(Failure::usage(format!(
                    "{cert} needs {key} (the certificate's private key)"
                )));
            }
            (None, Some(_)) => {
                return Err(Failure::usage(format!(
                    "{key} needs {cert} (the certificate it belongs to)"
                )));
            }
            _ => {}
        }
        self.tls()?;
        let tls_given = self.tls_ca.is_some() || self.tls_cert.is_some();
        let secure = urls.iter().any(|u| u.trim_start().starts_with("rediss://"));
        if tls_given && !secure && self.sentinel.is_none() {
            return Err(Failure::usage(format!(
                "{} / {cert} are for TLS servers, but no {url_flag} is rediss://; write \
                 the URL as rediss://host:port",
                self.named("tls_ca", "--tls-ca")
            )));
        }
        Ok(())
    }

    /// The TLS files' contents: the CA, and the client certificate and key.
    ///
    /// # Errors
    ///
    /// A usage failure naming the flag of a file that cannot be read.
    pub(crate) fn tls(&self) -> Result<Tls, Failure> {
        let read = |flag: &str, path: &Option<std::path::PathBuf>| {
            path.as_ref()
                .map(|p| {
                    std::fs::read(p).map_err(|e| {
                        Failure::usage(format!("{flag} {}: cannot read it: {e}", p.display()))
                    })
                })
                .transpose()
        };
        let ca = read(&self.named("tls_ca", "--tls-ca"), &self.tls_ca)?;
        let cert = read(&self.named("tls_cert", "--tls-cert"), &self.tls_cert)?;
        let key = read(&self.named("tls_key", "--tls-key"), &self.tls_key)?;
        Ok(Tls {
            ca,
            client: cert.zip(key),
        })
    }

    /// The one server URL to connect to.
    ///
    /// # Errors
    ///
    /// A usage failure for two URLs, or for three or more (Redlock).
    #[cfg(feature = "bench")]
    pub(crate) fn single_url(&self) -> Result<String, Failure> {
        single(self.servers()?, &self.named("urls", "--url"))
    }
}

/// How `run` or `acquire` takes its hold: the lease, the wait, and what
/// a conflict exits with.
#[derive(Debug, Clone)]
pub(crate) struct LeaseArgs {
    /// Lease length.
    pub(crate) ttl: Duration,
    /// How long to wait, as the library takes it (`Duration::MAX`: until
    /// acquired).
    pub(crate) wait: Duration,
    /// Try once, do not wait.
    pub(crate) no_wait: bool,
    /// The exit code for "busy" and "wait timed out" (`-E`).
    pub(crate) conflict: u8,
    /// Show the one-line status while waiting (stderr is a terminal, no `-q`).
    pub(crate) progress: bool,
    /// `--at-least`: a release keeps the lease until then.
    pub(crate) at_least: Option<Duration>,
    /// `--lock-delay` (the plain lock).
    pub(crate) lock_delay: Duration,
    /// What each hold says of its holder (`run`: host, pid and command).
    pub(crate) about: Option<String>,
}

impl LeaseArgs {
    /// The lease `ttl` taken as `wait` says, for `global`'s output settings.
    pub(crate) fn new(ttl: Duration, wait: &WaitArgs, global: &Global) -> LeaseArgs {
        LeaseArgs {
            ttl,
            wait: wait.wait.unwrap_or(Wait::Forever).duration(),
            // --wait 0 is --no-wait, as flock's -w 0.
            no_wait: wait.no_wait || wait.wait == Some(Wait::For(Duration::ZERO)),
            conflict: wait.conflict_exit_code,
            progress: !global.quiet && nix::unistd::isatty(std::io::stderr()).unwrap_or(false),
            at_least: None,
            lock_delay: Duration::ZERO,
            about: None,
        }
    }
}

impl LeaseArgs {
    /// Takes `spent` (connecting) off the wait; a wait until acquired
    /// stays one.
    pub(crate) fn spend(&mut self, spent: Duration) {
        if self.wait != Duration::MAX {
            self.wait = self.wait.saturating_sub(spent);
        }
    }
}

/// The certificates given by --tls-ca, --tls-cert and --tls-key (PEM).
#[derive(Debug, Default)]
pub(crate) struct Tls {
    /// The CA to trust.
    pub(crate) ca: Option<Vec<u8>>,
    /// The client certificate chain and its key.
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
}

/// `host:port` of a Redis URL (port 6379 when none is given), to tell
/// servers apart.
///
/// # Errors
///
/// A usage failure for a URL that is not a Redis URL.
pub(crate) fn address_of(url: &str) -> Result<String, Failure> {
    address_named(url, "--url")
}

/// [`address_of`], with the failure naming `flag` (`--url`, or
/// `LEASEHOLD_URL` when the URL came from there).
fn address_named(url: &str, flag: &str) -> Result<String, Failure> {
    let bad = |why: &str| {
        Failure::usage(format!(
            "{flag} {:?} is not a Redis URL ({why}); write redis://[user:password@]host:port[/db], \
             rediss:// for TLS, or unix:///path/to/redis.sock",
            leasehold::redact_url(url)
        ))
    };
    let info =
        redis::IntoConnectionInfo::into_connection_info(url).map_err(|e| bad(&e.to_string()))?;
    match info.addr() {
        redis::ConnectionAddr::Tcp(host, port)
        | redis::ConnectionAddr::TcpTls { host, port, .. } => Ok(format!("{host}:{port}")),
        redis::ConnectionAddr::Unix(path) => Ok(path.display().to_string()),
        _ => Err(bad("unknown address kind")),
    }
}

/// The library's rules for a key prefix, checked before connecting.
fn check_prefix(prefix: &str, flag: &str) -> Result<(), Failure> {
    let bad = prefix.is_empty()
        || prefix.len() > 128
        || prefix.contains(['{', '}', '*', '?', '[', ']', '\\'])
        || prefix.contains(char::is_whitespace);
    if bad {
        return Err(Failure::usage(format!(
            "{flag} {prefix:?}: a prefix is 1 to 128 bytes without braces, glob characters \
             (*?[]\\) or whitespace"
        )));
    }
    Ok(())
}

/// What the `--url`s name. Its `Debug` shows each URL through
/// [`leasehold::redact_url`].
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Servers {
    /// One Redis.
    One(String),
    /// Independent masters of a Redlock (three or more).
    Redlock(Vec<String>),
    /// Nodes of one Redis Cluster (`--cluster`).
    Cluster(Vec<String>),
    /// Sentinels of the master named `master` (`--sentinel`).
    Sentinel {
        /// The sentinels.
        sentinels: Vec<String>,
        /// The name they monitor the master under.
        master: String,
    },
}

impl std::fmt::Debug for Servers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = |urls: &[String]| -> Vec<String> {
            urls.iter().map(|u| leasehold::redact_url(u)).collect()
        };
        match self {
            Servers::One(url) => f
                .debug_tuple("One")
                .field(&leasehold::redact_url(url))
                .finish(),
            Servers::Redlock(urls) => f.debug_tuple("Redlock").field(&shown(urls)).finish(),
            Servers::Cluster(urls) => f.debug_tuple("Cluster").field(&shown(urls)).finish(),
            Servers::Sentinel { sentinels, master } => f
                .debug_struct("Sentinel")
                .field("sentinels", &shown(sentinels))
                .field("master", master)
                .finish(),
        }
    }
}

/// One URL is one Redis, three or more a Redlock; zero or two are refused.
/// `flag` is where they came from (`--url`, or `LEASEHOLD_URL`), for
/// messages.
pub(crate) fn servers_of(mut urls: Vec<String>, flag: &str) -> Result<Servers, Failure> {
    match urls.len() {
        0 => Err(Failure::usage("no Redis URL given; pass --url URL")),
        1 => Ok(Servers::One(urls.remove(0))),
        2 => Err(Failure::usage(format!(
            "{}: Redlock needs at least 3 independent masters (with 2, one node's failure stops \
             every lock); give one URL for one Redis, or three or more",
            urls_given(2, flag)
        ))),
        _ => Ok(Servers::Redlock(urls)),
    }
}

/// "two --url given", or "LEASEHOLD_URL holds two URLs": `n` URLs from `flag`.
fn urls_given(n: usize, flag: &str) -> String {
    let count = match n {
        2 => "two".to_owned(),
        n => n.to_string(),
    };
    if flag.starts_with("--") {
        format!("{count} {flag} given")
    } else {
        format!("{flag} holds {count} URLs")
    }
}

/// The URL of `servers` when it is one Redis; `flag` is where the URLs
/// came from (`--url`, or `LEASEHOLD_URL`), for messages.
///
/// # Errors
///
/// A usage failure for a Redlock, a cluster or Sentinel: demo and bench
/// run on one Redis.
pub(crate) fn single(servers: Servers, flag: &str) -> Result<String, Failure> {
    match servers {
        Servers::One(url) => Ok(url),
        Servers::Redlock(urls) => Err(Failure::usage(format!(
            "{}, which means Redlock, but this command runs on one Redis (Redlock is for run, \
             acquire, extend, release, status and list); give a single URL",
            urls_given(urls.len(), flag)
        ))),
        Servers::Cluster(_) | Servers::Sentinel { .. } => Err(Failure::usage(
            "this command runs on one Redis; drop --cluster / --sentinel and pass a single --url",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit;

    /// parse skips its first pass when no variable with the prefix is set:
    /// exact only while every option's variable has it, subcommands' too.
    #[test]
    fn every_variable_has_the_prefix() {
        fn check(command: &clap::Command, seen: &mut usize) {
            for arg in command.get_arguments() {
                if let Some(name) = arg.get_env() {
                    *seen += 1;
                    assert!(
                        name.to_str()
                            .is_some_and(|n| n.starts_with(VARIABLE_PREFIX)),
                        "{name:?} of --{}",
                        arg.get_id()
                    );
                }
            }
            for sub in command.get_subcommands() {
                check(sub, seen);
            }
        }
        let mut seen = 0;
        check(&Cli::command(), &mut seen);
        assert!(seen >= 12, "{seen} variables");
    }

    /// The variables that make `parse` tell the command line's options
    /// from the variables' are exactly the options' variables.
    #[test]
    fn option_variables_are_the_options_variables() {
        fn collect(command: &clap::Command, names: &mut std::collections::BTreeSet<String>) {
            for arg in command.get_arguments() {
                if let Some(name) = arg.get_env() {
                    names.insert(name.to_string_lossy().into_owned());
                }
            }
            for sub in command.get_subcommands() {
                collect(sub, names);
            }
        }
        let mut names = std::collections::BTreeSet::new();
        collect(&Cli::command(), &mut names);
        let listed: std::collections::BTreeSet<String> =
            OPTION_VARIABLES.iter().map(|n| (*n).to_owned()).collect();
        assert_eq!(names, listed);
    }

    #[test]
    fn durations_are_human_and_above_zero() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("banana").is_err());
        assert!(
            parse_duration("99999999999999999999999s")
                .unwrap_err()
                .contains("too large")
        );
        assert!(parse_duration("").is_err());
    }

    /// flock(1)'s habit: `-w 5` is five seconds, `-w 0.5` half of one.
    #[test]
    fn plain_numbers_are_seconds_as_flock_takes_them() {
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.25"), Ok(Duration::from_millis(1250)));
        assert_eq!(parse_duration(" 2 "), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("0.000000001"), Ok(Duration::from_nanos(1)));
        assert_eq!(parse_wait("5"), Ok(Wait::For(Duration::from_secs(5))));
        assert_eq!(parse_wait("0.5"), Ok(Wait::For(Duration::from_millis(500))));
        assert_eq!(parse_wait("0.0"), Ok(Wait::For(Duration::ZERO)));
        assert_eq!(parse_ttl("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_ttl("0.01"), Ok(Duration::from_millis(10)));
        for bad in [
            "0",
            "0.0",
            "-1",
            "1.",
            ".5.",
            "1e3",
            "0.0000000001",
            "nan",
            "inf",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(parse_ttl("0.005").unwrap_err().contains("10ms"));
        assert!(
            parse_duration("99999999999999999999999")
                .unwrap_err()
                .contains("too large")
        );
        // The message says both forms.
        assert!(parse_duration("soon").unwrap_err().contains("seconds"));
    }

    #[test]
    fn waits_are_durations_or_forever_and_forever_is_the_default() {
        assert_eq!(parse_wait("forever"), Ok(Wait::Forever));
        assert_eq!(parse_wait("inf"), Ok(Wait::Forever));
        assert_eq!(parse_wait("Infinity"), Ok(Wait::Forever));
        assert_eq!(parse_wait("2m"), Ok(Wait::For(Duration::from_secs(120))));
        assert!(parse_wait("soon").unwrap_err().contains("forever"));
        assert_eq!(Wait::Forever.duration(), Duration::MAX);
        for command in [&["run", "x", "--", "true"][..], &["acquire", "x"]] {
            let mut args = vec!["leasehold"];
            args.extend_from_slice(command);
            let Ok(Parsed::Run(cli)) = parse(args) else {
                panic!("{command:?} parses")
            };
            let wait = match &cli.command {
                Command::Run(run) => &run.wait,
                Command::Acquire(acquire) => &acquire.wait,
                other => panic!("{other:?}"),
            };
            let lease = LeaseArgs::new(Duration::from_secs(1), wait, &cli.global);
            assert_eq!(lease.wait, Duration::MAX, "{command:?}");
            assert_eq!(lease.conflict, 75, "{command:?}");
            assert!(!lease.no_wait, "{command:?}");
        }
    }

    #[test]
    fn ttls_are_checked_against_the_librarys_bounds() {
        assert_eq!(parse_ttl("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_ttl("24h"), Ok(Duration::from_secs(24 * 3600)));
        assert!(parse_ttl("100d").unwrap_err().contains("24h"));
        assert!(parse_ttl("5ms").is_err());
        assert_eq!(DEFAULT_PREFIX, leasehold::DEFAULT_PREFIX);
    }

    #[test]
    fn quoted_urls_in_clap_messages_lose_their_passwords() {
        assert_eq!(
            without_secrets("unexpected argument 'redis://:pw@h:1' found"),
            "unexpected argument 'redis://:***@h:1' found"
        );
        assert_eq!(
            without_secrets("invalid value 'a b@c' for '--ttl <DURATION>': no"),
            "invalid value '***@c' for '--ttl <DURATION>': no"
        );
        assert_eq!(
            without_secrets("unexpected argument 'jobs' found"),
            "unexpected argument 'jobs' found"
        );
    }

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn usage_errors_are_one_line() {
        let cases: &[&[&str]] = &[
            &["leasehold", "run", "x", "sleep", "1"],
            &["leasehold", "run", "x"],
            &["leasehold", "run", "--ttl", "0", "x", "--", "true"],
            &["leasehold", "acquire", "x", "--ttl", "banana"],
            &["leasehold", "--bogus", "list"],
            &["leasehold"],
            &["leasehold", "acquire", "x", "--wait", "1s", "--no-wait"],
        ];
        for args in cases {
            let err = parse(args.iter().copied()).expect_err("must be a usage error");
            assert_eq!(err.code, exit::USAGE, "{args:?}");
            assert!(!err.message.contains('\n'), "{args:?}: {}", err.message);
        }
        let err = parse(["leasehold", "run", "x", "sleep", "1"]).unwrap_err();
        assert!(err.message.contains("`--`"), "{}", err.message);
    }

    #[test]
    fn three_urls_mean_redlock_and_two_are_refused() {
        let urls = |n: usize| (0..n).map(|i| format!("redis://n{i}")).collect::<Vec<_>>();
        assert_eq!(
            servers_of(urls(1), "--url").unwrap(),
            Servers::One("redis://n0".into())
        );
        let err = servers_of(urls(2), "--url").unwrap_err();
        assert_eq!(err.code, exit::USAGE);
        assert!(err.message.contains("at least 3"), "{}", err.message);
        assert_eq!(
            servers_of(urls(3), "--url").unwrap(),
            Servers::Redlock(urls(3))
        );
        assert_eq!(
            servers_of(urls(5), "--url").unwrap(),
            Servers::Redlock(urls(5))
        );
        assert_eq!(servers_of(vec![], "--url").unwrap_err().code, exit::USAGE);
        let err = single(Servers::Redlock(urls(3)), "--url").unwrap_err();
        assert_eq!(err.code, exit::USAGE);
        assert!(err.message.contains("Redlock"), "{}", err.message);
    }

    #[test]
    fn node_timeout_is_for_redlock_only() {
        let with = |urls: usize, timeout: &str| {
            let mut args = vec!["leasehold".to_owned()];
            for i in 0..urls {
                args.extend(["--url".to_owned(), format!("redis://n{i}")]);
            }
            args.extend(["--node-timeout", timeout, "status", "x"].map(str::to_owned));
            parse(args)
        };
        match with(3, "50ms") {
            Ok(Parsed::Run(cli)) => {
                assert_eq!(cli.global.node_timeout, Some(Duration::from_millis(50)));
            }
            other => panic!("{other:?}"),
        }
        let err = with(1, "50ms").unwrap_err();
        assert_eq!(err.code, exit::USAGE);
        assert!(err.message.contains("Redlock"), "{}", err.message);
        let err = with(2, "50ms").unwrap_err();
        assert!(err.message.contains("at least 3"), "{}", err.message);
        let err = with(3, "0s").unwrap_err();
        assert_eq!(err.code, exit::USAGE);
        assert!(err.message.contains("above zero"), "{}", err.message);
    }

    #[test]
    fn run_holds_a_lock_a_read_a_write_or_a_permit() {
        let mode = |args: &[&str]| {
            let mut all = vec!["leasehold", "run", "x"];
            all.extend_from_slice(args);
            all.extend_from_slice(&["--", "true"]);
            match parse(all).map_err(|f| f.code) {
                Ok(Parsed::Run(cli)) => match cli.command {
                    Command::Run(run) => Ok(run.hold.mode()),
                    other => panic!("{other:?}"),
                },
                Ok(Parsed::Done) => panic!("help printed"),
                Err(code) => Err(code),
            }
        };
        assert_eq!(mode(&[]), Ok(Mode::Lock));
        assert_eq!(mode(&["--read"]), Ok(Mode::Read));
        assert_eq!(mode(&["--write"]), Ok(Mode::Write));
        assert_eq!(mode(&["--permits", "3"]), Ok(Mode::Permits(3)));
        for bad in [
            &["--permits", "0"][..],
            &["--permits", "-1"],
            &["--permits", "many"],
            &["--read", "--write"],
            &["--write", "--permits", "2"],
            &["--read", "--permits", "2"],
        ] {
            assert_eq!(mode(bad), Err(exit::USAGE), "{bad:?}");
        }
    }
}
