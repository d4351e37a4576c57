from hotloop.cli import main

main()
