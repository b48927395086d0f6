"""python -m wgradcache"""

from .cli import main

main()
