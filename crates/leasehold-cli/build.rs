//! Writes the man page, leasehold(1), from the same clap definition the
//! binary parses with (src/args.rs), into OUT_DIR; `leasehold man` prints it.
//! Part of the package, so it works under `cargo package` and `cargo install`.

#[allow(dead_code, unreachable_pub)]
#[path = "src/args.rs"]
mod args;

use clap::CommandFactory;

fn main() {
    println!("cargo::rerun-if-changed=src/args.rs");
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let command = args::Cli::command();
    let mut page = Vec::new();
    let man = clap_mangen::Man::new(command.clone());
    man.render(&mut page).expect("render the man page");
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
    std::fs::write(out.join("leasehold.1"), page).expect("write the man page to OUT_DIR");
}
