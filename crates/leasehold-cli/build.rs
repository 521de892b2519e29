//! Writes the man page, leasehold(1), from the same clap definition the
//! binary parses with (src/args.rs), into OUT_DIR; `leasehold man` prints it.
//! Part of the package, so it works under `cargo package` and `cargo install`.

#[allow(dead_code, unreachable_pub)]
#[path = "src/args.rs"]
mod args;

use std::io::Write;

use clap::CommandFactory;

fn main() {
    println!("cargo::rerun-if-changed=src/args.rs");
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let command = args::Cli::command();
    let mut page = Vec::new();
    let man = clap_mangen::Man::new(command.clone());
    // Section by section rather than `render`: the exit codes get EXIT
    // STATUS (not clap_mangen's "EXTRA", which would hold --help's closing
    // text), and the sections clap knows nothing of are written here.
    man.render_title(&mut page)
        .and_then(|()| man.render_name_section(&mut page))
        .and_then(|()| man.render_synopsis_section(&mut page))
        .and_then(|()| man.render_description_section(&mut page))
        .and_then(|()| man.render_options_section(&mut page))
        .and_then(|()| man.render_subcommands_section(&mut page))
        .expect("render the man page");
    // One page for everything: each visible command's synopsis, description
    // and options follow the global ones.
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("leasehold {}", sub.get_name());
        page.extend_from_slice(format!(".SH \"{}\"\n", name.to_uppercase()).as_bytes());
        let sub_man = clap_mangen::Man::new(sub.clone().bin_name(name));
        sub_man
            .render_synopsis_section(&mut page)
            .and_then(|()| sub_man.render_description_section(&mut page))
            .and_then(|()| sub_man.render_options_section(&mut page))
            .expect("render a command's section");
    }
    check_environment(&command);
    write_sections(&mut page).expect("write the closing sections");
    man.render_version_section(&mut page)
        .expect("render the version");
    write_see_also(&mut page).expect("write SEE ALSO");
    std::fs::write(out.join("leasehold.1"), page).expect("write the man page to OUT_DIR");
}

/// Fails the build if an option reads a variable that ENVIRONMENT does not
/// list, so the section cannot fall behind the options.
fn check_environment(command: &clap::Command) {
    for arg in command.get_arguments() {
        if let Some(var) = arg.get_env() {
            let var = var.to_string_lossy();
            assert!(
                args::ENVIRONMENT.iter().any(|(name, _)| *name == var),
                "{var} (of --{}) is missing from args::ENVIRONMENT",
                arg.get_id()
            );
        }
    }
}

/// EXIT STATUS, ENVIRONMENT and EXAMPLES, in roff.
fn write_sections(page: &mut Vec<u8>) -> std::io::Result<()> {
    writeln!(page, ".SH \"EXIT STATUS\"")?;
    for (code, meaning) in args::EXIT_CODES {
        writeln!(page, ".TP\n\\fB{code}\\fR\n{}", roff(meaning))?;
    }
    writeln!(page, ".SH ENVIRONMENT")?;
    writeln!(
        page,
        "Every global option also comes from its variable; an option given on the command line \
         wins over its variable, and an empty variable counts as unset."
    )?;
    for (var, meaning) in args::ENVIRONMENT {
        writeln!(page, ".TP\n\\fB{}\\fR\n{}", roff(var), roff(meaning))?;
    }
    writeln!(page, ".SH EXAMPLES")?;
    for (example, what) in args::EXAMPLES {
        writeln!(page, ".TP\n\\fB{}\\fR\n{}", roff(example), roff(what))?;
    }
    Ok(())
}

/// SEE ALSO, the page's last section.
fn write_see_also(page: &mut Vec<u8>) -> std::io::Result<()> {
    writeln!(
        page,
        ".SH \"SEE ALSO\"\n.BR flock (1),\n.BR redis\\-server (1),\n.BR redis\\-cli (1)"
    )
}

/// `text` as roff body text: backslashes and dashes escaped, and a line
/// that would start with a control character kept as text.
fn roff(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with(['.', '\'']) {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}
