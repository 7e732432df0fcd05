"""What a person hands us, read once: Kubernetes objects (`objects`: YAML files, or the
documents of a live cluster), the SchedulerConfig file (`config`), a saved dcgm-exporter
scrape (`scrape`). The operator reads its config file here too, so this room sits below both
the operator and the offline tools."""


class InputError(Exception):
    """Unreadable or invalid input; the message names the file, the object and the field."""
