"""python -m wgradcache"""

from wgradcache.cli import main

main()
