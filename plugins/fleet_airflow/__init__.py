"""The Airflow adapter of the toolkit. Importing it installs, for the process, how an object store
data root is reached (fleet_airflow.clusters.install_data_root_store: the connection
FLEET_DATA_ROOT_CONN_ID names, looked up only when an s3:// root is used)."""


def _install_data_root_store() -> None:
    from fleetkit.core.datasets import install_object_store

    def resolve():
        from fleet_airflow.clusters import data_root_store_options

        return data_root_store_options()

    install_object_store(resolve)


_install_data_root_store()
