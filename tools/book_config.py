"""Write a copy of _config.yml for `make test`: labs render their stored outputs, chapters execute."""
import os
import sys

import yaml

src, dst = sys.argv[1:3]
with open(src) as f:
    cfg = yaml.safe_load(f)
execute = cfg.setdefault("execute", {})
execute["execute_notebooks"] = "force"
execute["exclude_patterns"] = list(execute.get("exclude_patterns", [])) + ["labs/*"]
# Jupyter Book finds local extensions relative to the config file, which moves to dst's folder.
extensions = cfg.get("sphinx", {}).get("local_extensions") or {}
for name, path in extensions.items():
    extensions[name] = os.path.relpath(os.path.join(os.path.dirname(src), path), os.path.dirname(dst))
with open(dst, "w") as f:
    yaml.safe_dump(cfg, f, sort_keys=False)
