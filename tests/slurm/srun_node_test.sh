#!/usr/bin/env bash
# A real Slurm on this machine: installs slurm-wlm and munge when missing
# (scripts/setup-slurm), writes a one-node slurm.conf in a private temporary
# directory (every path absolute: the daemons change directory to /), starts
# munged, slurmctld and slurmd on 127.0.0.1 with it, runs one job step
#   srun -O -n 6 parafab node --servers 2 --workers 3 ... -- parafab worker ...
# (-O: overcommit, six tasks on two CPUs), checks that every process exited 0
# and every worker found every value; then trains lr with srun -n 5 (2 servers,
# 2 workers) and with parafab launch and compares their held-out log loss;
# stops the daemons in every case.
#
# Usage: srun_node_test.sh PARAFAB_BINARY SOURCE_DIR
# Exit status: 0 passed, 1 failed, 77 skipped (no rights to start daemons,
# or the daemons cannot run here), with the reason on stdout.
# PARAFAB_SLURM_NO_INSTALL=1: do not install, skip when Slurm is missing.
# PARAFAB_SLURM_KEEP=1: keep the temporary directory (logs) for a post-mortem.
set -uo pipefail

bin=${1:?usage: srun_node_test.sh PARAFAB_BINARY SOURCE_DIR}
src=${2:?usage: srun_node_test.sh PARAFAB_BINARY SOURCE_DIR}

say() { echo "slurm test: $*"; }
skip() { echo "SKIP: slurm test: $*"; exit 77; }
fail() { echo "FAIL: slurm test: $*"; exit 1; }

# --- rights -----------------------------------------------------------------
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    say "not root: running again under sudo -n"
    exec sudo -n -E "$0" "$@"
  fi
  skip "needs root (or passwordless sudo) to start munged, slurmctld and slurmd; run as root to include it"
fi

# --- packages ----------------------------------------------------------------
if [[ ${PARAFAB_SLURM_NO_INSTALL:-0} == 1 ]]; then
  for c in munged mungekey slurmctld slurmd srun sinfo; do
    command -v "$c" >/dev/null || PATH="$PATH:/usr/sbin" command -v "$c" >/dev/null ||
      skip "PARAFAB_SLURM_NO_INSTALL=1 and $c is missing (scripts/setup-slurm installs it)"
  done
else
  "$src/scripts/setup-slurm" || fail "scripts/setup-slurm could not install slurm-wlm and munge"
fi
export PATH="$PATH:/usr/sbin:/sbin"

# An outer Slurm job's variables would steer srun and parafab node.
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM_|SBATCH_|SRUN_|SALLOC_|PARAFAB_|OMPI_|PMI_)')

# --- a private configuration ---------------------------------------------------
tmp=$(mktemp -d /tmp/parafab-slurm.XXXXXX) || fail "mktemp"
chmod 755 "$tmp"
pids=()
# The slurmstepd processes of this configuration (slurmd's children,
# reparented to init): they carry SLURM_CONF in their environment.
our_stepds() {
  local p
  for p in $(pgrep -x slurmstepd); do
    { tr '\0' '\n' <"/proc/$p/environ" | grep -qxF "SLURM_CONF=$tmp/slurm.conf"; } 2>/dev/null && echo "$p"
  done
  return 0
}
stepds=""
cleanup() {
  local rc=$?
  # Let the steps finish with the daemons still up, then stop what this
  # script started, newest first, by pid; last, any slurmstepd of this
  # configuration that outlived its slurmd (they are reparented to init).
  if [[ -n ${SLURM_CONF:-} ]]; then
    scancel --quiet --full --signal=KILL --user=root 2>/dev/null
    wait_until 10 "$$" "[[ -z \$(squeue -h 2>/dev/null) ]]" >/dev/null 2>&1
    # A finishing slurmstepd may no longer show its environment: wait for
    # those too (never kill them: they are not known to be ours).
    stepds="$(our_stepds) $(pgrep -x slurmstepd | while read -r p; do [[ -r /proc/$p/environ ]] && tr '\0' '\n' <"/proc/$p/environ" >/dev/null 2>&1 || echo "$p"; done)"
    alive() { local p; for p in $stepds; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
    wait_until 10 "$$" "! alive" >/dev/null 2>&1
  fi
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  for p in $(our_stepds); do kill -KILL "$p" 2>/dev/null; done
  if [[ ${PARAFAB_SLURM_KEEP:-0} == 1 ]]; then say "kept $tmp"; else rm -rf "$tmp"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Free TCP ports on 127.0.0.1: nothing answers a connection there now.
used_ports=" "
free_port() {
  local p
  for _ in $(seq 200); do
    p=$((20000 + RANDOM % 12000))  # below the ephemeral range (32768-): no other test's socket lands there
    [[ $used_ports == *" $p "* ]] && continue
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      used_ports+="$p "
      echo "$p"
      return 0
    fi
  done
  return 1
}
ctld_port=$(free_port) && slurmd_port=$(free_port) && parafab_port=$(free_port) || fail "no free port on 127.0.0.1"

host=$(hostname -s)
mkdir -p "$tmp/munge" "$tmp/state" "$tmp/spool"
chmod 700 "$tmp/munge"
cat >"$tmp/slurm.conf" <<EOF
ClusterName=parafab
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge/munge.socket
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=parafab Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$tmp/slurm.conf

log_tails() {
  for f in "$tmp"/munge/munged.log "$tmp"/slurmctld.log "$tmp"/slurmd.log "$tmp"/*.out; do
    [[ -f $f ]] && { echo "---- $f (last lines)"; tail -n 25 "$f"; }
  done
}

# Polls `check` every 0.1 s until it succeeds, a pid in `watch` dies, or
# `secs` pass. 0: ready; 1: timed out; 2: the daemon died.
wait_until() {
  local secs=$1 watch=$2 check=$3 deadline=$((SECONDS + $1))
  while ((SECONDS < deadline)); do
    eval "$check" >/dev/null 2>&1 && return 0
    kill -0 "$watch" 2>/dev/null || return 2
    sleep 0.1
  done
  return 1
}

# --- daemons ---------------------------------------------------------------------
t_start=$SECONDS
mungekey --create --keyfile="$tmp/munge/munge.key" 2>/dev/null ||
  dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$tmp/munge/munge.key"
munged -F -f --key-file="$tmp/munge/munge.key" --socket="$tmp/munge/munge.socket" \
  --pid-file="$tmp/munge/munged.pid" --log-file="$tmp/munge/munged.log" --seed-file="$tmp/munge/munged.seed" \
  >"$tmp/munged.out" 2>&1 &
pids+=($!)
wait_until 20 "${pids[-1]}" "[[ -S $tmp/munge/munge.socket ]]" || { log_tails; skip "munged did not start here (see above)"; }

slurmctld -D -c -f "$tmp/slurm.conf" >"$tmp/slurmctld.out" 2>&1 &
pids+=($!)
wait_until 30 "${pids[-1]}" "scontrol ping | grep -q UP" || { log_tails; skip "slurmctld did not start here (see above)"; }

slurmd -D -f "$tmp/slurm.conf" -N "$host" >"$tmp/slurmd.out" 2>&1 &
pids+=($!)
wait_until 60 "${pids[-1]}" "sinfo -h -N -o %T | grep -Eq '^(idle|mixed|allocated)'" ||
  { log_tails; sinfo -N -l; skip "slurmd did not register with slurmctld here (see above)"; }
say "munged, slurmctld and slurmd up on 127.0.0.1 (ports $ctld_port, $slurmd_port) in $((SECONDS - t_start)) s: $(sinfo -h -N -o '%N %T %c')"

# --- the job -------------------------------------------------------------------------
token="$tmp/job.token"
(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$token")
export PARAFAB_TOKEN_FILE=$token FI_TCP_IFACE=lo
table=id=0,kind=sparse,width=4,updater=sgd,lr=1
t_job=$SECONDS
timeout -k 10 180 srun -O -n 6 -l --kill-on-bad-exit=1 --time=4 --job-name=parafab-node-test \
  "$bin" node --servers 2 --workers 3 --port "$parafab_port" --bind 127.0.0.1 --table "$table" --join-timeout 60 \
  -- "$bin" worker --keys 20000 >"$tmp/srun.out" 2>&1
rc=$?
say "srun exited $rc after $((SECONDS - t_job)) s; its output:"
cat "$tmp/srun.out"

((rc == 0)) || { log_tails; fail "srun exited $rc"; }
matches=$(grep -c "every value matches" "$tmp/srun.out")
((matches == 3)) || fail "$matches of 3 workers said 'every value matches'"
for r in 0 1 2 3 4 5; do
  grep -Eq "^ *$r: node: global rank $r of 6 \(slurm: SLURM_PROCID=$r SLURM_NTASKS=6 .*SLURM_[A-Z_]*NODELIST=$host" \
    "$tmp/srun.out" || fail "task $r did not place itself from SLURM_PROCID/SLURM_NTASKS/the node list"
done
grep -Eq "^ *0: scheduler listening on 127.0.0.1:$parafab_port" "$tmp/srun.out" || fail "task 0 did not run the scheduler"
grep -Eq "^ *[12]: server 1 \(rank" "$tmp/srun.out" || fail "no server 1 among tasks 1-2"
say "1 scheduler, 2 servers, 3 workers under srun; every worker checked every value"

# --- lr under srun against parafab launch ----------------------------------------
# The same training job (1 scheduler, 2 servers, 2 workers, BSP) started by
# srun -n 5 and by parafab launch must reach the same held-out log loss
# (within 1%: asynchronous pushes make the last digits differ).
"$bin" gen-data --out "$tmp/train.svm" --test-out "$tmp/test.svm" --examples 20000 --test-examples 5000 \
  --features 4096 --nnz 20 --seed 7 --threads 2 >"$tmp/gen.out" 2>&1 || { cat "$tmp/gen.out"; fail "gen-data"; }
train=(train --train "$tmp/train.svm" --test "$tmp/test.svm" --model lr --epochs 2 --threads 1 --quiet)
parafab_port=$(free_port) || fail "no free port on 127.0.0.1"
t_job=$SECONDS
timeout -k 10 180 srun -O -n 5 -l --kill-on-bad-exit=1 --time=4 --job-name=parafab-train-test \
  "$bin" node --servers 2 --workers 2 --port "$parafab_port" --bind 127.0.0.1 --consistency bsp --join-timeout 60 \
  -- "$bin" "${train[@]}" >"$tmp/srun-train.out" 2>&1
rc=$?
say "srun (lr) exited $rc after $((SECONDS - t_job)) s"
((rc == 0)) || { cat "$tmp/srun-train.out"; log_tails; fail "srun of parafab train exited $rc"; }
timeout -k 10 180 "$bin" launch --servers 2 --workers 2 --consistency bsp -- "$bin" "${train[@]}" \
  >"$tmp/launch-train.out" 2>&1 || { cat "$tmp/launch-train.out"; fail "parafab launch of the same training job failed"; }
held_out() { grep -Eo 'held-out \([0-9]+ examples\): log loss [0-9.]+' "$1" | awk '{print $NF}' | tail -n 1; }
srun_loss=$(held_out "$tmp/srun-train.out")
launch_loss=$(held_out "$tmp/launch-train.out")
[[ -n $srun_loss ]] || { cat "$tmp/srun-train.out"; fail "no held-out log loss in srun's output"; }
[[ -n $launch_loss ]] || { cat "$tmp/launch-train.out"; fail "no held-out log loss in launch's output"; }
say "held-out log loss: srun $srun_loss, launch $launch_loss"
awk -v a="$srun_loss" -v b="$launch_loss" 'BEGIN { r = a / b; exit !(r > 0.99 && r < 1.01 && a < 0.69) }' ||
  fail "srun's held-out log loss $srun_loss is not within 1% of launch's $launch_loss (or did not learn: ln 2 = 0.693)"
say "PASS: scheduler, servers and workers under srun; every worker checked every value; lr under srun matches launch"
exit 0
