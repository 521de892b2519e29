//! `leasehold-sim`: runs simulated schedules of the shipped client and
//! scripts (see `scripts/sim`, which builds it with `--cfg leasehold_sim`).

#[cfg(not(leasehold_sim))]
fn main() {
    eprintln!("leasehold-sim: build and run it with scripts/sim (it needs --cfg leasehold_sim)");
    std::process::exit(2);
}

#[cfg(leasehold_sim)]
mod cli;

/// See Cargo.toml: allocation-heavy, and faster with mimalloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(leasehold_sim)]
fn main() {
    std::process::exit(cli::main());
}
