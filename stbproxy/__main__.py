from stbproxy.cli import main

main()
