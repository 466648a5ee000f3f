from agent.cli.app import main

main()
