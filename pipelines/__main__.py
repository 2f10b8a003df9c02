"""`python -m worldfactory_dagster.pipelines ARGS...`: the `dagster` command, without its API-stability
warnings (see quiet.py).

Importing the package installed the filters; `dagster dev` itself warns that it is superseded by `dg dev`.
"""

import sys

from dagster._cli import main

sys.argv[0] = "dagster"
sys.exit(main())
