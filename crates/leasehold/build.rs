//! Writes every shipped script as one constant, `SHIPPED` (name, text):
//! its `.lua` file with the paragraphs of `prelude.lua` it uses put in at its
//! top, without comment lines (`src/scripts/shake.rs`), so that neither Redis
//! on each call nor the client at start-up pays for the rest of the prelude,
//! nor the client for hashing the comments.

use std::fmt::Write as _;
use std::path::Path;

include!("src/scripts/shake.rs");

fn main() {
    let dir = Path::new("src/scripts");
    println!("cargo:rerun-if-changed=src/scripts");
    println!("cargo:rerun-if-changed=build.rs");
    let prelude = std::fs::read_to_string(dir.join("prelude.lua")).expect("reads prelude.lua");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("reads src/scripts")
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            let stem = name.strip_suffix(".lua")?;
            (stem != "prelude").then(|| stem.to_owned())
        })
        .collect();
    names.sort();
    let mut out = String::from("const SHIPPED: &[(&str, &str)] = &[\n");
    for name in &names {
        let body = std::fs::read_to_string(dir.join(format!("{name}.lua")))
            .unwrap_or_else(|e| panic!("reads {name}.lua: {e}"));
        let text = shipped(&prelude, &body);
        writeln!(out, "    ({name:?}, {text:?}),").expect("writes to a String");
    }
    out.push_str("];\n");
    let target = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("shipped_scripts.rs");
    std::fs::write(target, out).expect("writes shipped_scripts.rs");
}
