"""Package layout that pyproject.toml alone cannot say: ``resources/`` ships as ``app/resources``.

The checkout keeps ``resources/`` at the top (app/core/paths.py finds it there); a wheel carries it
inside the package, where the same module finds it once installed. Everything else about the
project is in pyproject.toml.
"""

from setuptools import find_namespace_packages, setup

SKIP = ["*__pycache__*"]
RESOURCES = [
    "app.resources",
    *(f"app.resources.{name}" for name in find_namespace_packages("resources", exclude=SKIP)),
]

setup(
    packages=[*find_namespace_packages(include=["app", "app.*"], exclude=SKIP), *RESOURCES],
    package_dir={"app.resources": "resources"},
    package_data={**{name: ["*"] for name in RESOURCES}, "app.store.migrations": ["*.mako"]},
)
