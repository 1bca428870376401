"""The toolkit's workflow definitions, one module per workflow, installed as the package fleet_dags.

A deployment does not copy these files: `fleetctl deploy dags FOLDER` writes one small loader file
per workflow into the folder its scheduler reads, which imports the module from the installed
package, so upgrading the package upgrades the workflows (docs/deploy.md).
"""
