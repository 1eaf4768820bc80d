#!/usr/bin/env bash
# A Spark standalone cluster on loopback: one master and two workers (1 core, 2 GiB each).
#
#   infra/spark_standalone.sh start   # starts it in the background, prints the master URL
#   infra/spark_standalone.sh stop    # stops exactly the processes that `start` recorded
#
# Settings (environment):
#   SPARK_HOME                the Spark to run (default: the folder of the installed pyspark)
#   PYSPARK_PYTHON            the workers' Python (default: the project's .venv/bin/python)
#   PRIVLAKE_CLUSTER_STATE    folder for pid files, logs and work dirs (default: infra/.cluster)
#   PRIVLAKE_CLUSTER_PORT     the master's port (default: 7077)
#   PRIVLAKE_CLUSTER_TIMEOUT  seconds to wait for both workers to register (default: 90)
set -euo pipefail

infra_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
project_dir=$(dirname "$infra_dir")
python=${PYSPARK_PYTHON:-$project_dir/.venv/bin/python}
state_dir=${PRIVLAKE_CLUSTER_STATE:-$infra_dir/.cluster}
port=${PRIVLAKE_CLUSTER_PORT:-7077}
timeout=${PRIVLAKE_CLUSTER_TIMEOUT:-90}
workers=2

fail() {
    echo "spark_standalone: $*" >&2
    exit 1
}

alive() {
    [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

any_alive() {
    local pid
    for pid in "$@"; do
        kill -0 "$pid" 2>/dev/null && return 0
    done
    return 1
}

stop_cluster() {
    local pid_file pids=() waited=0
    for pid_file in "$state_dir"/worker-*.pid "$state_dir"/master.pid; do
        [[ -f $pid_file ]] || continue
        pids+=("$(cat "$pid_file")")
    done
    if ((${#pids[@]})); then
        kill -TERM "${pids[@]}" 2>/dev/null || true
        while any_alive "${pids[@]}" && ((waited < 150)); do
            sleep 0.1
            waited=$((waited + 1))
        done
        for pid in "${pids[@]}"; do
            kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
        done
    fi
    rm -f "$state_dir"/worker-*.pid "$state_dir"/master.pid
}

start_cluster() {
    [[ -x $python ]] || fail "no Python at $python (run 'make install' or set PYSPARK_PYTHON)"
    export PYSPARK_PYTHON=$python
    export SPARK_HOME=${SPARK_HOME:-$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')}
    export SPARK_LOCAL_IP=127.0.0.1
    [[ -x $SPARK_HOME/bin/spark-class ]] || fail "no spark-class under SPARK_HOME=$SPARK_HOME"
    for pid_file in "$state_dir"/master.pid "$state_dir"/worker-*.pid; do
        alive "$pid_file" && fail "a cluster recorded in $state_dir is already running; stop it first"
    done
    mkdir -p "$state_dir/logs" "$state_dir/work"
    rm -f "$state_dir"/*.pid

    nohup "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
        --host 127.0.0.1 --port "$port" --webui-port 0 \
        >"$state_dir/logs/master.log" 2>&1 </dev/null &
    echo $! >"$state_dir/master.pid"

    local deadline=$((SECONDS + timeout))
    until grep -q "I have been elected leader" "$state_dir/logs/master.log" 2>/dev/null; do
        alive "$state_dir/master.pid" || { stop_cluster; fail "the master exited; see $state_dir/logs/master.log"; }
        ((SECONDS < deadline)) || { stop_cluster; fail "the master did not start within ${timeout}s"; }
        sleep 0.5
    done

    local index
    for index in $(seq 1 "$workers"); do
        nohup "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker \
            "spark://127.0.0.1:$port" --cores 1 --memory 2g --host 127.0.0.1 --webui-port 0 \
            --work-dir "$state_dir/work/worker-$index" \
            >"$state_dir/logs/worker-$index.log" 2>&1 </dev/null &
        echo $! >"$state_dir/worker-$index.pid"
    done

    until (($(grep -c "Registering worker" "$state_dir/logs/master.log" 2>/dev/null || true) >= workers)); do
        for index in $(seq 1 "$workers"); do
            alive "$state_dir/worker-$index.pid" ||
                { stop_cluster; fail "worker $index exited; see $state_dir/logs/worker-$index.log"; }
        done
        ((SECONDS < deadline)) || { stop_cluster; fail "the workers did not register within ${timeout}s"; }
        sleep 0.5
    done
    echo "spark://127.0.0.1:$port"
}

case ${1:-} in
    start) start_cluster ;;
    stop) stop_cluster ;;
    *) fail "usage: $0 start|stop" ;;
esac
