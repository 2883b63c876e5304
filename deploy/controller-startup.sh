#!/bin/bash
# Iris controller startup script for its Compute Engine VM. `iris cluster start` (ControllerVm in
# iris/controller/providers/gcp_compute.py) fills the IRIS_* placeholders (names in double braces)
# with shell-quoted values and passes the result as the instance's `startup-script` metadata; the
# cluster config travels beside it as the metadata attribute named by IRIS_CONFIG_KEY.
# It runs as root at each boot (also after `iris cluster restart`), so it must be idempotent:
# the state directory on the boot disk is kept, and the controller resumes from it.
set -euo pipefail

IRIS_PACKAGE={{IRIS_PACKAGE}}
IRIS_BIND={{IRIS_BIND}}
IRIS_STATE_DIR={{IRIS_STATE_DIR}}
IRIS_DASHBOARD_PORT={{IRIS_DASHBOARD_PORT}}
IRIS_IMAGE={{IRIS_IMAGE}}
IRIS_CONFIG_KEY={{IRIS_CONFIG_KEY}}

IRIS_HOME=/opt/iris
VENV="$IRIS_HOME/venv"
exec > >(tee -a /var/log/iris-startup.log) 2>&1   # the serial console shows it too
echo "iris startup: controller at $(date -u +%FT%TZ)"

mkdir -p /etc/iris "$IRIS_STATE_DIR"
curl -sf -H 'Metadata-Flavor: Google' -o /etc/iris/cluster.yaml \
  "http://metadata.google.internal/computeMetadata/v1/instance/attributes/$IRIS_CONFIG_KEY"

SERVE="controller serve --state-dir $IRIS_STATE_DIR --bind $IRIS_BIND --config /etc/iris/cluster.yaml --dashboard-host 0.0.0.0 --dashboard-port $IRIS_DASHBOARD_PORT"
if [ -n "$IRIS_IMAGE" ]; then
  command -v docker >/dev/null 2>&1 || (apt-get update && apt-get install -y docker.io)
  EXEC="/usr/bin/docker run --rm --name iris-controller --network host -v /etc/iris:/etc/iris -v $IRIS_STATE_DIR:$IRIS_STATE_DIR $IRIS_IMAGE $SERVE"
else
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
  EXEC="$VENV/bin/iris $SERVE"
fi

# The dashboard off loopback needs a token: made once, kept on the disk with the state.
[ -s "$IRIS_STATE_DIR/dashboard.token" ] || head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$IRIS_STATE_DIR/dashboard.token"
cat > /etc/systemd/system/iris-controller.service <<UNIT
[Unit]
Description=Iris controller (jobs, scheduler, region actors, registry)
After=network-online.target
Wants=network-online.target

[Service]
Environment=IRIS_DASHBOARD_TOKEN=$(cat "$IRIS_STATE_DIR/dashboard.token")
ExecStart=$EXEC
Restart=always
RestartSec=5
KillMode=mixed
TimeoutStopSec=30
LimitNOFILE=1048576

[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable --now iris-controller.service
echo "iris startup: controller started"
