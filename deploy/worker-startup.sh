#!/bin/bash
# Iris worker startup script for TPU VMs. GcpTpuProvider fills the IRIS_* placeholders
# (names in double braces) with shell-quoted values and passes the result as the node's `startup-script` metadata.
# It runs as root on every host of the slice at each boot, so it must be idempotent.
set -euo pipefail

IRIS_CONTROLLER={{IRIS_CONTROLLER}}
IRIS_REGION={{IRIS_REGION}}
IRIS_ZONE={{IRIS_ZONE}}
IRIS_SLICE_ID={{IRIS_SLICE_ID}}
IRIS_SCALE_GROUP={{IRIS_SCALE_GROUP}}
IRIS_CLUSTER={{IRIS_CLUSTER}}
IRIS_PACKAGE={{IRIS_PACKAGE}}
IRIS_ACCELERATOR={{IRIS_ACCELERATOR}}

IRIS_HOME=/opt/iris
VENV="$IRIS_HOME/venv"
LOG=/var/log/iris-startup.log
exec > >(tee -a "$LOG") 2>&1
echo "iris startup: slice $IRIS_SLICE_ID group $IRIS_SCALE_GROUP zone $IRIS_ZONE at $(date -u +%FT%TZ)"

# Which host of the slice this is (TPU VMs expose it as agent-worker-number).
HOST_INDEX=$(curl -sf -H 'Metadata-Flavor: Google' \
  http://metadata.google.internal/computeMetadata/v1/instance/attributes/agent-worker-number \
  || echo 0)

# uv installs in seconds; fall back to pip if the uv download fails.
mkdir -p "$IRIS_HOME"
if ! command -v uv >/dev/null 2>&1; then
  curl -LsSf https://astral.sh/uv/install.sh | env UV_INSTALL_DIR=/usr/local/bin sh || true
fi
if command -v uv >/dev/null 2>&1; then
  [ -x "$VENV/bin/python" ] || uv venv --python 3.11 "$VENV"
  uv pip install --python "$VENV/bin/python" --upgrade "$IRIS_PACKAGE"
else
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install --upgrade pip "$IRIS_PACKAGE"
fi

# The cluster token proves this host is a worker (without it the controller refuses its
# registration); the controller hands it over as node metadata. Kept readable by root only.
mkdir -p /etc/iris
TOKEN_FLAG=""
if curl -sf -H 'Metadata-Flavor: Google' \
    http://metadata.google.internal/computeMetadata/v1/instance/attributes/iris-cluster-token \
    -o /etc/iris/cluster.token.new; then
  install -m 600 /etc/iris/cluster.token.new /etc/iris/cluster.token
  TOKEN_FLAG="--token-file /etc/iris/cluster.token"
fi
rm -f /etc/iris/cluster.token.new

# Run the worker under systemd so it restarts on crash and stops cleanly on shutdown.
cat > /etc/iris-worker.env <<ENV
IRIS_CONTROLLER=$IRIS_CONTROLLER
IRIS_REGION=$IRIS_REGION
IRIS_WORKER_ATTRS=$TOKEN_FLAG --worker-id $IRIS_SLICE_ID-w$HOST_INDEX --attr slice_id=$IRIS_SLICE_ID --attr scale_group=$IRIS_SCALE_GROUP --attr zone=$IRIS_ZONE --attr cluster=$IRIS_CLUSTER --attr accelerator_type=$IRIS_ACCELERATOR --attr host_index=$HOST_INDEX
ENV
cat > /etc/systemd/system/iris-worker.service <<'UNIT'
[Unit]
Description=Iris worker (runs task attempts for the Iris controller)
After=network-online.target
Wants=network-online.target

[Service]
EnvironmentFile=/etc/iris-worker.env
ExecStart=/opt/iris/venv/bin/iris worker --controller ${IRIS_CONTROLLER} --region ${IRIS_REGION} $IRIS_WORKER_ATTRS
# on-failure: a worker drained (`iris worker drain`) leaves with exit 0 and stays gone;
# one that crashed comes back. SIGTERM first (KillMode=mixed): it says goodbye and
# stops its tasks with their 10 s grace before TimeoutStopSec.
Restart=on-failure
RestartSec=5
KillMode=mixed
TimeoutStopSec=30
LimitNOFILE=1048576

[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable --now iris-worker.service
systemctl restart iris-worker.service
echo "iris startup: worker started"
