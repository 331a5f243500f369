from envbuilder.cli import main

main()
