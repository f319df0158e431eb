//! The deterministic simulation, guided by coverage: the input chooses the program (every
//! choice the generator makes is drawn from the input bytes, so mutations change programs
//! piece by piece), the setup and the schedule's seed.
//!
//! Input: byte 0 picks one of `harness::SETUPS`; bytes 1..9 are the schedule's seed (little
//! endian); the rest feeds the program generator (zeros once it runs out).
//!
//! Checks: what `harness::run` checks after every step (every client receives what it does
//! directly against the model, no server back in the pool owing replies or inside a
//! transaction, no statement believed on a server that lacks it, buffers within bounds) and
//! at rest. A failure panics with the setup, seed and program, which replay it in
//! `cargo test --lib sim::tests::replay`.

#![no_main]

use droid_pool::sim::harness::{self, SETUPS};
use droid_pool::sim::program::generate_from;
use libfuzzer_sys::fuzz_target;
use rand::RngCore;

/// Choices drawn from the fuzz input, then zeros.
struct InputRng<'a>(&'a [u8]);

impl RngCore for InputRng<'_> {
    fn next_u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        self.fill_bytes(&mut b);
        u32::from_le_bytes(b)
    }

    fn next_u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        self.fill_bytes(&mut b);
        u64::from_le_bytes(b)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        let n = dest.len().min(self.0.len());
        dest[..n].copy_from_slice(&self.0[..n]);
        dest[n..].fill(0);
        self.0 = &self.0[n..];
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let setup = &SETUPS[pick as usize % SETUPS.len()];
    let mut seed = [0u8; 8];
    let n = rest.len().min(8);
    seed[..n].copy_from_slice(&rest[..n]);
    let seed = u64::from_le_bytes(seed);
    let program = generate_from(&mut InputRng(&rest[n..]), &setup.rules);
    if let Err(failure) = harness::run(setup, &program, seed) {
        panic!(
            "setup {}, seed {seed}: {failure}\nreplay: DROID_SIM_SETUP={} DROID_SIM_SEED={seed} \
             DROID_SIM_PROGRAM='{program}' DROID_SIM_TRACE=1 cargo test --lib sim::tests::replay \
             -- --nocapture",
            setup.name, setup.name
        );
    }
});
