# shellcheck shell=bash
# Sets and exports DROID_POOL_SHARED: where the team's shared tools and references are. It is
# the variable if already set, else ../shared beside the repository, else /work/shared (their
# place on the CI machine when the repository is cloned elsewhere). Empty if none exists.
if [[ -z ${DROID_POOL_SHARED:-} ]]; then
  for _shared in "$(dirname "${BASH_SOURCE[0]}")/../../../shared" /work/shared; do
    if [[ -d $_shared/tools ]]; then
      DROID_POOL_SHARED=$(cd "$_shared" && pwd)
      break
    fi
  done
  unset _shared
fi
export DROID_POOL_SHARED=${DROID_POOL_SHARED:-}
