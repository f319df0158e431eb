# syntax=docker/dockerfile:1
# droid-pool: one image with both binaries.
#   /usr/local/bin/droid-pool           the pooler (the default entrypoint)
#   /usr/local/bin/droid-pool-operator  the PoolConfig controller (`droid-pool-operator crd` prints the CRD)
# Build:  docker build -t droid-pool:dev .
# The runtime stage has no shell and no package manager: probes are HTTP (/startupz, /livez,
# /readyz on 9127), so nothing needs to exec into the container.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS build
# PostgreSQL and pgbench, for the training run of the profile-guided build (this stage only).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends postgresql postgresql-contrib \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY scripts/build-pgo.sh ./scripts/
COPY scripts/lib/pg.sh ./scripts/lib/
# PGO=0: droid-pool without profile-guided optimisation.
ARG PGO=1
# The release profile's link-time optimisation and codegen units (Cargo.toml: fat, 1, the
# fastest binary). A test build may ask for less (LTO=off, CODEGEN_UNITS=16: minutes instead
# of a quarter of an hour on 2 cores); the image is then slower per transaction, not different.
ARG LTO=fat
ARG CODEGEN_UNITS=1
# droid-pool comes from scripts/build-pgo.sh, the same binary bench/run.sh measures: an
# instrumented build runs pgbench through itself against a throwaway PostgreSQL, then the
# release build uses that profile (it falls back to the plain release build, saying why, where
# that cannot run). The operator is a plain release build.
# The registry and the target directory are BuildKit cache mounts: after a source change only
# droid-pool itself is compiled again. --locked: exactly the dependencies of Cargo.lock.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    export CARGO_PROFILE_RELEASE_LTO=$LTO CARGO_PROFILE_RELEASE_CODEGEN_UNITS=$CODEGEN_UNITS \
 && PGO=$PGO bash scripts/build-pgo.sh \
 && cargo build --release --locked --bin droid-pool-operator \
 && install -D -m 0755 target/pgo/droid-pool /out/droid-pool \
 && install -D -m 0755 target/release/droid-pool-operator /out/droid-pool-operator

# distroless/cc: glibc and libgcc only (the build stage is Debian 12, so is this), no shell.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="droid-pool" \
      org.opencontainers.image.description="A PostgreSQL connection pooler for Kubernetes, and its operator" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/droid-pool /out/droid-pool-operator /usr/local/bin/
# The numeric id of distroless's "nonroot", so that runAsNonRoot can verify it.
USER 65532:65532
# 6432: PostgreSQL clients. 9127: admin HTTP (probes, /metrics, /status). 8080: operator metrics.
EXPOSE 6432 9127 8080
# SIGTERM starts the graceful drain (readiness 503, accept window, drain.mode, drain.timeout).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/droid-pool"]
CMD ["--config", "/etc/droid-pool/droid-pool.yaml"]
