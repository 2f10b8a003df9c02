"""Which packages the project installs (everything else is in pyproject.toml).

The engine is `worldfactory` and its subpackages. `worldfactory_verifiers` is the plugin name verifiers
imports for the taskset id `worldfactory-verifiers` (`vf-eval worldfactory-verifiers ...`): it must be an
installed top-level package, found from any folder, not only from a checkout.

The Dagster code location keeps its folders at the top of the repository (pipelines/, assets/,
resources/, as workspace.yaml loads them) but installs
under the project's own name, `worldfactory_dagster.pipelines` and so on: generic top-level names in
site-packages would shadow, or be shadowed by, any other project's `assets`, `resources` or
`pipelines`. pyproject.toml cannot both discover packages and rename folders, hence this file.
"""

from setuptools import find_packages, setup

DAGSTER_LOCATION = "worldfactory_dagster"
DAGSTER_FOLDERS = ("pipelines", "assets", "resources")

setup(
    packages=[*find_packages(include=["worldfactory", "worldfactory.*"]), "worldfactory_verifiers",
              *(f"{DAGSTER_LOCATION}.{folder}" for folder in DAGSTER_FOLDERS)],
    package_dir={f"{DAGSTER_LOCATION}.{folder}": folder for folder in DAGSTER_FOLDERS},
)
