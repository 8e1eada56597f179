import Tandem
