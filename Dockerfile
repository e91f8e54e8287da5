# A JupyterHub single-user image with Calibration Lab for every user, installed by the admin's one command
# (python3 -m instructor hub: README, "On a JupyterHub"). NOT BUILT YET: the machine it was written on reaches only
# package registries (PyPI, Debian, npm), not quay.io; tests/test_hub.py runs the same command on a real hub instead.
#   docker build -t calibration-lab-hub .     (from a git clone: the kit is built from committed files)
# then, in jupyterhub_config.py: c.DockerSpawner.image = "calibration-lab-hub" (KubeSpawner: singleuser.image).
FROM quay.io/jupyter/base-notebook:python-3.12
USER root
RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*
COPY . /tmp/calibration-lab
RUN cd /tmp/calibration-lab && PIP_NO_CACHE_DIR=1 python3 -m instructor hub --jupyterlab-env /opt/conda \
    && rm -rf /tmp/calibration-lab
# Each student's own copy of the kit when their server starts; -n never overwrites their work.
RUN echo 'cp -rn /opt/calibration-lab/kit/. "$HOME/calibration-lab/"' \
    > /usr/local/bin/before-notebook.d/10-calibration-lab.sh
USER ${NB_UID}
