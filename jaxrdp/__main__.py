from jaxrdp.cli import run

run()
